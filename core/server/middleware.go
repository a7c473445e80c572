package server

import (
	"crypto/subtle"
	"fmt"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/labstack/echo/v4"
)

// requestIDKey is where a request's id lives in the echo context.
const requestIDKey = "k3.request_id"

// requestID gives every request an id, sent back as X-Request-Id and
// written next to whatever the log says about the request, so a client
// can quote it. A sane incoming X-Request-Id (a proxy's) is kept.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !saneRequestID(id) {
			id = newID("req-")
		}
		c.Set(requestIDKey, id)
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
}

// saneRequestID accepts ids that are safe to echo in a header and a log:
// 1 to 128 characters of letters, digits and ._:-
func saneRequestID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == ':', r == '-':
		default:
			return false
		}
	}
	return true
}

func requestIDOf(c echo.Context) string {
	id, _ := c.Get(requestIDKey).(string)
	return id
}

// recoverPanics turns a handler panic into a 500 instead of a dropped
// connection; the panic is a bug, so it is logged loudly.
func (s *Server) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = &internalError{what: "the request", err: fmt.Errorf("handler panic: %v", r)}
			}
		}()
		return next(c)
	}
}

// publicPaths need no API key: the health probe, and the page's static
// files so that a browser can load the page, which then asks for the key.
func isPublic(path string) bool {
	switch path {
	case "/health", "/v1/health", "/", "/index.html", "/app.js", "/style.css", "/favicon.svg":
		return true
	}
	return false
}

// authenticate requires the API key, when one is set, as a bearer token
// (the scheme in any case, RFC 7235). CORS preflights carry no
// credentials by design, so they pass.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	key := []byte(s.opts.APIKey)
	return func(c echo.Context) error {
		r := c.Request()
		if len(key) == 0 || isPublic(r.URL.Path) || r.Method == http.MethodOptions {
			return next(c)
		}
		scheme, token, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
		if xk := r.Header.Get("X-Api-Key"); xk != "" && scheme == "" {
			// Anthropic's clients send the key so; llama-server takes it on every route.
			scheme, token = "Bearer", xk
		}
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(token)), key) != 1 {
			challenge := `Bearer realm="k3"`
			if scheme != "" {
				challenge += `, error="invalid_token"`
			}
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, challenge)
			return newAPIError(http.StatusUnauthorized, "authentication_error", "Invalid API Key")
		}
		return next(c)
	}
}

// requireJSON guards the routes that take a JSON body. Without it a web
// page on any origin could start generations on a keyless local server
// with a "simple" cross-origin request (text/plain, which browsers send
// without a CORS preflight).
func requireJSON(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ct := c.Request().Header.Get(echo.HeaderContentType)
		if !isJSONType(ct) {
			got := "no Content-Type"
			if ct != "" {
				got = fmt.Sprintf("Content-Type %q", ct)
			}
			return newAPIError(http.StatusUnsupportedMediaType, "invalid_request_error",
				"the request body must be JSON sent with Content-Type: application/json, not "+got)
		}
		return next(c)
	}
}

// isJSONType accepts application/json and application/*+json, with no
// charset or a UTF-8 one (JSON is UTF-8, RFC 8259).
func isJSONType(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return false
	}
	sub, ok := strings.CutPrefix(mt, "application/")
	return ok && (sub == "json" || strings.HasSuffix(sub, "+json"))
}

// hostPolicy decides which Host headers a server without an API key
// answers. A page served from a name that its attacker later points at
// 127.0.0.1 (DNS rebinding) reaches the server as same-origin, with its
// own name in Host; refusing names the server does not go by stops it.
// IP literals are always allowed: an address cannot be rebound, and a
// browser sends one only when the page itself came from that address.
type hostPolicy struct {
	off   bool // API key set, Unix socket, or "*" configured
	names map[string]bool
}

func newHostPolicy(o Options) hostPolicy {
	if o.APIKey != "" || strings.HasSuffix(o.Host, ".sock") {
		return hostPolicy{off: true}
	}
	p := hostPolicy{names: map[string]bool{"localhost": true}}
	add := func(h string) {
		if h = normalizeHost(h); h != "" {
			p.names[h] = true
		}
	}
	add(o.Host)
	for _, h := range o.AllowedHosts {
		if strings.TrimSpace(h) == "*" {
			return hostPolicy{off: true}
		}
		add(h)
	}
	if ip := net.ParseIP(o.Host); ip != nil && ip.IsUnspecified() {
		// Bound to every interface: the machine's own names reach it.
		if hn, err := os.Hostname(); err == nil && hn != "" {
			add(hn)
			short, _, _ := strings.Cut(hn, ".")
			add(short)
			add(short + ".local")
		}
	}
	return p
}

// normalizeHost lowercases a host, drops a port, IPv6 brackets and a
// trailing dot.
func normalizeHost(h string) string {
	h = strings.TrimSpace(h)
	if hp, _, err := net.SplitHostPort(h); err == nil {
		h = hp
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

func (p hostPolicy) allows(host string) bool {
	if p.off {
		return true
	}
	h := normalizeHost(host)
	// HTTP/1.0 may omit Host; browsers never do.
	return h == "" || net.ParseIP(h) != nil || p.names[h]
}

// checkHost refuses requests addressed to a name the server does not go by.
func (s *Server) checkHost(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if host := c.Request().Host; !s.hosts.allows(host) {
			return newAPIError(http.StatusForbidden, "permission_error", fmt.Sprintf(
				"Host %q is not one of this server's names (a guard against DNS rebinding); "+
					"allow it with --allowed-hosts or server.allowed_hosts, or set an API key", host))
		}
		return next(c)
	}
}
