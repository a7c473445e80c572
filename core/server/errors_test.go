package server_test

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/server"
)

// TestBadInput sends each kind of bad request as raw HTTP: every one gets
// the right status and an OpenAI-style error, and none reaches the engine.
func TestBadInput(t *testing.T) {
	ts := newTestServer(t, server.Options{MaxBodyBytes: 64 << 10})
	user := `"messages":[{"role":"user","content":"hi"}]`
	longPrompt := strings.Repeat("hello ", 2100) // > 2048 tokens, < 64 KiB
	tests := []struct {
		name, method, path, body string
		status                   int
		typ                      string
	}{
		{"malformed JSON", "POST", "/v1/chat/completions", `{"messages":[`, 400, "invalid_request_error"},
		{"syntax error", "POST", "/v1/chat/completions", `{"messages" 1}`, 400, "invalid_request_error"},
		{"trailing data", "POST", "/v1/chat/completions", `{` + user + `} {}`, 400, "invalid_request_error"},
		{"empty body", "POST", "/v1/chat/completions", ``, 400, "invalid_request_error"},
		{"not an object", "POST", "/v1/chat/completions", `[1,2]`, 400, "invalid_request_error"},
		{"messages wrong type", "POST", "/v1/chat/completions", `{"messages":"hi"}`, 400, "invalid_request_error"},
		{"content wrong type", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, "invalid_request_error"},
		{"content part without type", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"text":"x"}]}]}`, 400, "invalid_request_error"},
		{"temperature wrong type", "POST", "/v1/chat/completions", `{` + user + `,"temperature":"hot"}`, 400, "invalid_request_error"},
		{"stop wrong type", "POST", "/v1/chat/completions", `{` + user + `,"stop":5}`, 400, "invalid_request_error"},
		{"logit_bias bad key", "POST", "/v1/chat/completions", `{` + user + `,"logit_bias":{"abc":1}}`, 400, "invalid_request_error"},
		{"tool_choice wrong type", "POST", "/v1/chat/completions", `{` + user + `,"tool_choice":5}`, 400, "invalid_request_error"},
		{"empty messages", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, "invalid_request_error"},
		{"no messages", "POST", "/v1/chat/completions", `{}`, 400, "invalid_request_error"},
		{"unknown role", "POST", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"x"}]}`, 400, "invalid_request_error"},
		{"message without content", "POST", "/v1/chat/completions", `{"messages":[{"role":"user"}]}`, 400, "invalid_request_error"},
		{"top_p out of range", "POST", "/v1/chat/completions", `{` + user + `,"top_p":2}`, 400, "invalid_request_error"},
		{"negative temperature", "POST", "/v1/chat/completions", `{` + user + `,"temperature":-1}`, 400, "invalid_request_error"},
		{"max_tokens zero", "POST", "/v1/chat/completions", `{` + user + `,"max_tokens":0}`, 400, "invalid_request_error"},
		{"absurd max_tokens", "POST", "/v1/chat/completions", `{` + user + `,"max_tokens":1000000000000}`, 400, "invalid_request_error"},
		{"absurd max_completion_tokens", "POST", "/v1/chat/completions", `{` + user + `,"max_completion_tokens":99999999}`, 400, "invalid_request_error"},
		{"n > 1", "POST", "/v1/chat/completions", `{` + user + `,"n":2}`, 400, "invalid_request_error"},
		{"logit_bias outside vocab", "POST", "/v1/chat/completions", `{` + user + `,"logit_bias":{"99999":1}}`, 400, "invalid_request_error"},
		{"empty stop string", "POST", "/v1/chat/completions", `{` + user + `,"stop":[""]}`, 400, "invalid_request_error"},
		{"tool without name", "POST", "/v1/chat/completions", `{` + user + `,"tools":[{"type":"function","function":{}}]}`, 400, "invalid_request_error"},
		{"tool_choice unknown function", "POST", "/v1/chat/completions", `{` + user + `,` + weatherTools + `,"tool_choice":{"type":"function","function":{"name":"nope"}}}`, 400, "invalid_request_error"},
		{"template rejects kwargs", "POST", "/v1/chat/completions", `{` + user + `,"chat_template_kwargs":{"thinking_effort":"extreme"}}`, 400, "invalid_request_error"},
		{"prompt longer than context", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + longPrompt + `"}]}`, 400, "exceed_context_size_error"},
		{"completion prompt too long", "POST", "/v1/completions", `{"prompt":"` + longPrompt + `"}`, 400, "exceed_context_size_error"},
		{"completion no prompt", "POST", "/v1/completions", `{"max_tokens":3}`, 400, "invalid_request_error"},
		{"completion empty prompt", "POST", "/v1/completions", `{"prompt":""}`, 400, "invalid_request_error"},
		{"completion token outside vocab", "POST", "/v1/completions", `{"prompt":[1,2,100000]}`, 400, "invalid_request_error"},
		{"completion several prompts", "POST", "/v1/completions", `{"prompt":["a","b"]}`, 400, "invalid_request_error"},
		{"completion prompt wrong type", "POST", "/v1/completions", `{"prompt":{"a":1}}`, 400, "invalid_request_error"},
		{"huge body", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 70<<10) + `"}]}`, 413, "invalid_request_error"},
		{"huge tokenize body", "POST", "/tokenize", `{"content":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "invalid_request_error"},
		{"tokenize wrong type", "POST", "/tokenize", `{"content":5}`, 400, "invalid_request_error"},
		{"detokenize outside vocab", "POST", "/detokenize", `{"tokens":[-1]}`, 400, "invalid_request_error"},
		{"detokenize wrong type", "POST", "/detokenize", `{"tokens":"abc"}`, 400, "invalid_request_error"},
		{"unknown route", "GET", "/v2/nothing", ``, 404, "not_found_error"},
		{"unknown POST route", "POST", "/v1/rerank", `{}`, 404, "not_found_error"},
		{"embeddings not supported", "POST", "/v1/embeddings", `{"input":"x"}`, 501, "not_supported_error"},
		{"wrong method", "GET", "/v1/chat/completions", ``, 405, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := ts.do(t, tt.method, tt.path, tt.body)
			if code != tt.status {
				t.Fatalf("status %d, want %d: %.300s", code, tt.status, body)
			}
			e := decodeErr(t, body)
			if e.Error.Type != tt.typ || e.Error.Code != tt.status {
				t.Errorf("error %+v, want type %q code %d", e.Error, tt.typ, tt.status)
			}
		})
	}
	// None of them ran a generation.
	_, _, m := ts.do(t, "GET", "/metrics", "")
	if !strings.Contains(string(m), "\nk3_requests_total 0\n") {
		t.Errorf("a bad request reached the engine:\n%s", m)
	}
}

func TestLoading(t *testing.T) {
	s := server.New(server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	h := &testServer{Server: ts, srv: s}
	for _, p := range []struct{ method, path, body string }{
		{"GET", "/health", ""}, {"GET", "/v1/models", ""},
		{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`},
		{"POST", "/v1/completions", `{"prompt":"x"}`}, {"POST", "/tokenize", `{"content":"x"}`},
	} {
		code, _, body := h.do(t, p.method, p.path, p.body)
		if code != 503 || decodeErr(t, body).Error.Type != "unavailable_error" {
			t.Errorf("%s %s while loading: %d %s", p.method, p.path, code, body)
		}
	}
	if code, _, body := h.do(t, "GET", "/status", ""); code != 200 || !strings.Contains(string(body), `"ready":false`) {
		t.Errorf("/status while loading: %d %s", code, body)
	}
	if code, _, _ := h.do(t, "GET", "/metrics", ""); code != 200 {
		t.Errorf("/metrics while loading: %d", code)
	}
	s.SetBackend(tinyBackend(t))
	if code, _, body := h.do(t, "GET", "/health", ""); code != 200 || string(body) != `{"status":"ok"}`+"\n" {
		t.Errorf("/health after loading: %d %q", code, body)
	}
}

func TestAPIKey(t *testing.T) {
	ts := newTestServer(t, server.Options{APIKey: "sekret"})
	tests := []struct {
		method, path, body, auth string
		status                   int
	}{
		{"GET", "/health", "", "", 200},
		{"GET", "/", "", "", 200},
		{"GET", "/app.js", "", "", 200},
		{"GET", "/markdown.js", "", "", 200},
		{"GET", "/chats.js", "", "", 200},
		{"GET", "/v1/models", "", "", 401},
		{"GET", "/v1/models", "", "Bearer wrong", 401},
		{"GET", "/v1/models", "", "sekret", 401},
		{"GET", "/v1/models", "", "Bearer sekret", 200},
		{"GET", "/metrics", "", "", 401},
		{"GET", "/status", "", "", 401},
		{"POST", "/tokenize", `{"content":"a"}`, "Bearer sekre", 401},
		{"POST", "/tokenize", `{"content":"a"}`, "Bearer sekret", 200},
		{"POST", "/v1/completions", `{"prompt":"a","max_tokens":1}`, "", 401},
		{"GET", "/nope", "", "", 401}, // no route probing without the key
	}
	for _, tt := range tests {
		code, _, body := ts.do(t, tt.method, tt.path, tt.body, "Authorization", tt.auth)
		if code != tt.status {
			t.Errorf("%s %s with %q: %d, want %d (%s)", tt.method, tt.path, tt.auth, code, tt.status, body)
		}
		if code == 401 && decodeErr(t, body).Error.Type != "authentication_error" {
			t.Errorf("401 body: %s", body)
		}
	}
}
