package server

import (
	"embed"
	"net/http"
	"path"

	"github.com/labstack/echo/v4"
)

// The chat page is plain HTML/CSS/JS with no build step and no network
// fetches, so the binary serves it as is.
//
//go:embed web
var webFS embed.FS

// webFiles maps the page's URL paths to its embedded files. They need no
// API key (isPublic): the browser loads the page, which then asks for it.
var webFiles = map[string]string{
	"/": "web/index.html", "/index.html": "web/index.html", "/app.js": "web/app.js",
	"/markdown.js": "web/markdown.js", "/chats.js": "web/chats.js",
	"/style.css": "web/style.css", "/favicon.svg": "web/favicon.svg",
	"/stats.html": "web/stats.html", "/stats.js": "web/stats.js",
}

// webRoutes registers the page's files with get (which adds HEAD).
func (s *Server) webRoutes(get func(string, echo.HandlerFunc)) {
	for path, file := range webFiles {
		get(path, func(c echo.Context) error {
			b, err := webFS.ReadFile(file)
			if err != nil {
				return echo.ErrNotFound
			}
			c.Response().Header().Set("Cache-Control", "no-cache")
			c.Response().Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:")
			return c.Blob(http.StatusOK, contentType(file), b)
		})
	}
}

func contentType(file string) string {
	switch path.Ext(file) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return "text/html; charset=utf-8"
}
