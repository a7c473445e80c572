package server

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"
)

// corsMethods are llama-server's default --cors-methods.
const corsMethods = "GET, POST, DELETE, OPTIONS"

// cors lets pages from the configured origins (Options.CORSOrigins; none
// by default, unlike llama-server's "*") read k3's answers, and answers
// every preflight (OPTIONS) itself, before the API key is checked: a
// browser sends preflights without credentials. An origin that is not
// allowed gets its preflight answered without Access-Control-Allow-*
// headers, so the browser refuses the real request. As in llama-server,
// the value "localhost" allows any origin on this machine's loopback
// names (http://localhost:3000, http://127.0.0.1, http://[::1]:8080).
// Preflights get 200 with no body, as llama-server answers them.
func (s *Server) cors(next echo.HandlerFunc) echo.HandlerFunc {
	any, local, allowed := false, false, map[string]bool{}
	for _, o := range s.opts.CORSOrigins {
		o = strings.TrimSuffix(strings.TrimSpace(o), "/")
		any = any || o == "*"
		if o == "localhost" {
			local = true
			continue
		}
		allowed[strings.ToLower(o)] = true
	}
	return func(c echo.Context) error {
		r, h := c.Request(), c.Response().Header()
		origin := r.Header.Get(echo.HeaderOrigin)
		ok := origin != "" && (any || allowed[strings.ToLower(origin)] || (local && isLocalOrigin(origin)))
		if origin != "" && !any {
			h.Add(echo.HeaderVary, echo.HeaderOrigin)
		}
		if ok {
			if any {
				h.Set(echo.HeaderAccessControlAllowOrigin, "*")
			} else {
				h.Set(echo.HeaderAccessControlAllowOrigin, origin)
			}
			h.Set(echo.HeaderAccessControlExposeHeaders, echo.HeaderXRequestID+", Retry-After")
		}
		if r.Method != http.MethodOptions {
			return next(c)
		}
		if ok {
			h.Set(echo.HeaderAccessControlAllowMethods, corsMethods)
			// "*" does not cover Authorization (Fetch standard), so the
			// headers asked for are named back.
			hdrs := r.Header.Get(echo.HeaderAccessControlRequestHeaders)
			if hdrs == "" {
				hdrs = "Authorization, Content-Type"
			}
			h.Set(echo.HeaderAccessControlAllowHeaders, hdrs)
			h.Set(echo.HeaderAccessControlMaxAge, "600")
		}
		return c.NoContent(http.StatusOK)
	}
}

// isLocalOrigin tells an origin whose host is a loopback name.
func isLocalOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	switch u.Hostname() {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}
