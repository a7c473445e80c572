package server

import (
	"net/http"
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
// headers, so the browser refuses the real request.
func (s *Server) cors(next echo.HandlerFunc) echo.HandlerFunc {
	any, allowed := false, map[string]bool{}
	for _, o := range s.opts.CORSOrigins {
		o = strings.TrimSuffix(strings.TrimSpace(o), "/")
		any = any || o == "*"
		allowed[strings.ToLower(o)] = true
	}
	return func(c echo.Context) error {
		r, h := c.Request(), c.Response().Header()
		origin := r.Header.Get(echo.HeaderOrigin)
		ok := origin != "" && (any || allowed[strings.ToLower(origin)])
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
		return c.NoContent(http.StatusNoContent)
	}
}
