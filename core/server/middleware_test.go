package server_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/server"
)

// send is ts.do with the Host header and every other header under the
// caller's control (no Content-Type unless given).
func (ts *testServer) send(t *testing.T, method, path, host, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// TestJSONContentTypeRequired: a body that is not sent as JSON is refused
// before anything reads it, so a cross-origin "simple" request (text/plain,
// a form, a typeless blob) from a web page cannot start a generation.
func TestJSONContentTypeRequired(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	tok := `{"content":"a"}`
	for _, tt := range []struct {
		ct     string
		status int
	}{
		{"text/plain", 415},
		{"text/plain;charset=UTF-8", 415},
		{"application/x-www-form-urlencoded", 415},
		{"multipart/form-data; boundary=x", 415},
		{"", 415},
		{"application/json; charset=latin1", 415},
		{"application/jsonx", 415},
		{"application/json", 200},
		{"Application/JSON; charset=utf-8", 200},
		{"application/vnd.api+json", 200},
	} {
		var hdr []string
		if tt.ct != "" {
			hdr = []string{"Content-Type", tt.ct}
		}
		for _, path := range []string{"/tokenize", "/v1/completions", "/v1/chat/completions", "/detokenize"} {
			if tt.status == 200 && path != "/tokenize" {
				continue // the generation routes' happy path is tested elsewhere
			}
			code, _, body := ts.send(t, "POST", path, "", tok, hdr...)
			if code != tt.status {
				t.Errorf("%s with Content-Type %q: %d, want %d (%s)", path, tt.ct, code, tt.status, body)
			}
			if code == 415 && !strings.Contains(decodeErr(t, body).Error.Message, "application/json") {
				t.Errorf("415 does not say what to send: %s", body)
			}
		}
	}
	_, _, m := ts.do(t, "GET", "/metrics", "")
	if !strings.Contains(string(m), "\nk3_requests_total 0\n") {
		t.Errorf("a refused request reached the engine:\n%s", m)
	}
}

// TestHostCheck: without an API key, a request addressed to a name the
// server does not go by (a DNS-rebinding page) is refused on every route.
func TestHostCheck(t *testing.T) {
	hn, _ := os.Hostname()
	for _, tt := range []struct {
		name string
		o    server.Options
		host string
		ok   bool
	}{
		{"rebound name", server.Options{}, "evil.example:8080", false},
		{"rebound name, no port", server.Options{}, "attacker.test", false},
		{"localhost", server.Options{}, "localhost:8080", true},
		{"LOCALHOST.", server.Options{}, "LOCALHOST.:8080", true},
		{"127.0.0.1", server.Options{}, "127.0.0.1:8080", true},
		{"[::1]", server.Options{}, "[::1]:8080", true},
		{"any IP literal", server.Options{}, "192.168.1.7:8080", true},
		{"configured name", server.Options{AllowedHosts: []string{"k3.lan"}}, "K3.lan:8080", true},
		{"other name with configured names", server.Options{AllowedHosts: []string{"k3.lan"}}, "evil.example", false},
		{"star", server.Options{AllowedHosts: []string{"*"}}, "evil.example", true},
		{"API key set", server.Options{APIKey: "k"}, "evil.example", true},
		{"bound name", server.Options{Host: "box.example"}, "box.example:8080", true},
		{"own host name, bound to a specific address", server.Options{}, hn, hn == "localhost"},
		{"own host name, bound to 0.0.0.0", server.Options{Host: "0.0.0.0"}, hn, true},
		{"own host name, bound to ::", server.Options{Host: "::"}, hn + ":80", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, tt.o)
			for _, path := range []string{"/health", "/", "/v1/models"} {
				code, _, body := ts.send(t, "GET", path, tt.host, "", "Authorization", "Bearer k")
				if (code != 403) != tt.ok {
					t.Errorf("%s with Host %q: %d (%s)", path, tt.host, code, body)
				}
				if code == 403 {
					if e := decodeErr(t, body); e.Error.Type != "permission_error" || !strings.Contains(e.Error.Message, "--allowed-hosts") {
						t.Errorf("403 body: %s", body)
					}
				}
			}
		})
	}
}

// TestHEAD: GET routes answer HEAD like GET, without a body.
func TestHEAD(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	for _, path := range []string{"/health", "/v1/models", "/metrics", "/", "/app.js"} {
		_, getHdr, _ := ts.send(t, "GET", path, "", "")
		code, hdr, body := ts.send(t, "HEAD", path, "", "")
		if code != 200 || len(body) != 0 || hdr.Get("Content-Type") != getHdr.Get("Content-Type") {
			t.Errorf("HEAD %s: %d %q, Content-Type %q (GET's %q)", path, code, body, hdr.Get("Content-Type"), getHdr.Get("Content-Type"))
		}
	}
}

// TestAuthHeaders: the 401 names its scheme (WWW-Authenticate), the
// scheme is matched in any case, and a CORS preflight, which carries no
// credentials, is not refused for lacking them.
func TestAuthHeaders(t *testing.T) {
	ts := newTestServer(t, server.Options{APIKey: "sekret"})
	code, hdr, _ := ts.send(t, "GET", "/v1/models", "", "")
	if code != 401 || hdr.Get("WWW-Authenticate") != `Bearer realm="k3"` {
		t.Errorf("no key: %d, WWW-Authenticate %q", code, hdr.Get("WWW-Authenticate"))
	}
	code, hdr, _ = ts.send(t, "GET", "/v1/models", "", "", "Authorization", "Bearer wrong")
	if code != 401 || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), `Bearer realm="k3", error="invalid_token"`) {
		t.Errorf("wrong key: %d, WWW-Authenticate %q", code, hdr.Get("WWW-Authenticate"))
	}
	for _, auth := range []string{"bearer sekret", "BEARER sekret", "Bearer  sekret"} {
		if code, _, body := ts.send(t, "GET", "/v1/models", "", "", "Authorization", auth); code != 200 {
			t.Errorf("%q: %d %s", auth, code, body)
		}
	}
	code, _, body := ts.send(t, "OPTIONS", "/v1/chat/completions", "", "",
		"Origin", "https://app.example", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization, content-type")
	if code == 401 {
		t.Errorf("preflight: 401 %s", body)
	}
}

// TestRequestID: every response carries an X-Request-Id; a sane one from
// the client is kept, anything else replaced; error bodies carry it too.
func TestRequestID(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	_, hdr, _ := ts.send(t, "GET", "/health", "", "")
	if !strings.HasPrefix(hdr.Get("X-Request-Id"), "req-") {
		t.Errorf("generated id %q", hdr.Get("X-Request-Id"))
	}
	_, hdr, _ = ts.send(t, "GET", "/health", "", "", "X-Request-Id", "lb-7f3a:01")
	if got := hdr.Get("X-Request-Id"); got != "lb-7f3a:01" {
		t.Errorf("sane id replaced by %q", got)
	}
	for _, bad := range []string{"a b", "x<script>", strings.Repeat("a", 129)} {
		_, hdr, _ = ts.send(t, "GET", "/health", "", "", "X-Request-Id", bad)
		if got := hdr.Get("X-Request-Id"); !strings.HasPrefix(got, "req-") {
			t.Errorf("id %q kept as %q", bad, got)
		}
	}
	_, hdr, body := ts.send(t, "GET", "/nope", "", "", "X-Request-Id", "abc")
	if hdr.Get("X-Request-Id") != "abc" || !strings.Contains(string(body), `"request_id":"abc"`) {
		t.Errorf("404 body %s", body)
	}
}

// panicBackend is the tiny backend whose generation panics with a message
// that names a file, as a bug deep in the engine might.
type panicBackend struct{ *scriptBackend }

func (panicBackend) Generate(context.Context, server.GenerateRequest, func(server.Piece) error) (server.GenerateResult, error) {
	panic("index out of range reading /models/secret/kimi-00003-of-00094.gguf at offset 123")
}

func TestPanicHidesInternals(t *testing.T) {
	logs := &syncWriter{}
	s := server.New(server.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), RequestLog: io.Discard},
		panicBackend{&scriptBackend{Backend: tinyBackend(t)}})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	h := &testServer{Server: ts, srv: s}
	code, hdr, body := h.do(t, "POST", "/v1/completions", `{"prompt":"x","max_tokens":2}`)
	id := hdr.Get("X-Request-Id")
	if code != 500 || strings.Contains(string(body), "secret") || !strings.Contains(string(body), id) {
		t.Errorf("%d %s", code, body)
	}
	if l := logs.String(); !strings.Contains(l, "secret") || !strings.Contains(l, id) {
		t.Errorf("log lacks the panic under %s:\n%s", id, l)
	}
}
