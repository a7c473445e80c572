package server_test

import (
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/server"
)

// TestCORS: preflights are answered without the API key; only configured
// origins (none by default) get Access-Control-Allow-Origin, on preflights
// and on the real answers, errors included.
func TestCORS(t *testing.T) {
	pre := []string{"Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, content-type"}
	t.Run("none by default", func(t *testing.T) {
		ts := newTestServer(t, server.Options{APIKey: "k"})
		code, hdr, _ := ts.do(t, "OPTIONS", "/v1/chat/completions", "", pre...)
		if code != 200 || hdr.Get("Access-Control-Allow-Origin") != "" || hdr.Get("Access-Control-Allow-Methods") != "" {
			t.Errorf("%d %v", code, hdr)
		}
	})
	t.Run("listed origin", func(t *testing.T) {
		ts := newTestServer(t, server.Options{APIKey: "k", CORSOrigins: []string{"https://app.example"}})
		code, hdr, _ := ts.do(t, "OPTIONS", "/v1/chat/completions", "", pre...)
		if code != 200 || hdr.Get("Access-Control-Allow-Origin") != "https://app.example" ||
			!strings.Contains(hdr.Get("Access-Control-Allow-Methods"), "POST") ||
			!strings.Contains(strings.ToLower(hdr.Get("Access-Control-Allow-Headers")), "authorization") {
			t.Errorf("preflight: %d %v", code, hdr)
		}
		code, hdr, _ = ts.do(t, "GET", "/v1/models", "", "Origin", "https://app.example")
		if code != 401 || hdr.Get("Access-Control-Allow-Origin") != "https://app.example" {
			t.Errorf("401 without the header the page needs to read it: %d %v", code, hdr)
		}
		code, hdr, _ = ts.do(t, "GET", "/v1/models", "", "Origin", "https://app.example", "Authorization", "Bearer k")
		if code != 200 || hdr.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(hdr.Get("Vary"), "Origin") {
			t.Errorf("GET: %d %v", code, hdr)
		}
		code, hdr, _ = ts.do(t, "OPTIONS", "/v1/models", "", "Origin", "https://evil.example", "Access-Control-Request-Method", "GET")
		if code != 200 || hdr.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("other origin: %d %v", code, hdr)
		}
	})
	t.Run("localhost", func(t *testing.T) {
		ts := newTestServer(t, server.Options{CORSOrigins: []string{"localhost"}})
		for _, o := range []string{"http://localhost", "http://localhost:8080", "http://127.0.0.1:3000", "http://[::1]:3000"} {
			_, hdr, _ := ts.do(t, "OPTIONS", "/completion", "", "Origin", o, "Access-Control-Request-Method", "POST")
			if hdr.Get("Access-Control-Allow-Origin") != o {
				t.Errorf("%s: %v", o, hdr)
			}
		}
		for _, o := range []string{"http://evil.com", "http://notlocalhost", "http://localhost.evil.com", "localhost"} {
			_, hdr, _ := ts.do(t, "OPTIONS", "/completion", "", "Origin", o, "Access-Control-Request-Method", "POST")
			if v := hdr.Get("Access-Control-Allow-Origin"); v != "" {
				t.Errorf("%s allowed as %q", o, v)
			}
		}
	})
	t.Run("any", func(t *testing.T) {
		ts := newTestServer(t, server.Options{CORSOrigins: []string{"*"}})
		code, hdr, _ := ts.do(t, "GET", "/health", "", "Origin", "https://x.example")
		if code != 200 || hdr.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("%d %v", code, hdr)
		}
	})
}
