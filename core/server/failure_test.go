package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/server"
)

// failingBackend is the real backend whose generation fails after a few
// tokens, as it would if storage went away mid-request.
type failingBackend struct{ *scriptBackend }

var errStorage error = stagingError{errors.New("reading expert weights: input/output error")}

// stagingError is a backend error that says in general terms what failed.
type stagingError struct{ error }

func (stagingError) PublicReason() string { return "the staging backend failed" }

func (f failingBackend) Generate(ctx context.Context, req server.GenerateRequest, emit func(server.Piece) error) (server.GenerateResult, error) {
	n := 0
	res, err := f.scriptBackend.Generate(ctx, req, func(p server.Piece) error {
		if n++; n > 3 {
			return errStorage
		}
		return emit(p)
	})
	return res, err
}

// TestGenerationFails: a failed generation answers 500 (or an error event
// in a stream) that says what failed and gives the request id, but not the
// error's text, which can name files and shared-memory regions; the log has
// the text under the same id.
func TestGenerationFails(t *testing.T) {
	sb := &scriptBackend{Backend: tinyBackend(t), reply: "some reasoning that goes on for a while", eog: true}
	logs := &syncWriter{}
	s := server.New(server.Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), RequestLog: io.Discard}, failingBackend{sb})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	h := &testServer{Server: ts, srv: s}
	body := `{"messages":[{"role":"user","content":"x"}]`
	code, hdr, b := h.do(t, "POST", "/v1/chat/completions", body+`}`)
	id := hdr.Get("X-Request-Id")
	var e struct {
		Error struct {
			Message   string `json:"message"`
			Type      string `json:"type"`
			RequestID string `json:"request_id"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil || code != 500 || e.Error.Type != "server_error" {
		t.Fatalf("whole: %d %s", code, b)
	}
	if id == "" || e.Error.RequestID != id || !strings.Contains(e.Error.Message, "generation failed: the staging backend failed; see the server log, request id ") ||
		!strings.Contains(e.Error.Message, id) || strings.Contains(string(b), "input/output error") {
		t.Errorf("whole: X-Request-Id %q, body %s", id, b)
	}
	if l := logs.String(); !strings.Contains(l, "request_id="+id) || !strings.Contains(l, "input/output error") {
		t.Errorf("the log lacks the error under id %s:\n%s", id, l)
	}
	req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/completions", strings.NewReader(body+`,"stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "client-42")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	events := strings.Split(strings.TrimSpace(string(data)), "\n\n")
	last := events[len(events)-1]
	if !strings.HasPrefix(last, `data: {"error":`) || !strings.Contains(last, `"request_id":"client-42"`) ||
		strings.Contains(string(data), "input/output error") || strings.Contains(string(data), "[DONE]") {
		t.Errorf("stream should end in an error event with the request id and no internals, without [DONE]:\n%s", data)
	}
	if resp.Header.Get("X-Request-Id") != "client-42" {
		t.Errorf("the client's X-Request-Id was not kept: %q", resp.Header.Get("X-Request-Id"))
	}
	// The server is fine afterwards.
	if code, _, _ := h.do(t, "GET", "/health", ""); code != 200 {
		t.Errorf("health %d", code)
	}
}

// TestWholeRequestClientLeaves: a client waiting for a non-streamed reply
// that hangs up cancels its generation too.
func TestWholeRequestClientLeaves(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions",
			strings.NewReader(`{"prompt":"x","max_tokens":1500,"ignore_eos":true}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitMetric(t, ts, "k3_requests_processing", 1)
	cancel()
	<-done
	waitMetric(t, ts, "k3_requests_processing", 0)
	waitMetric(t, ts, "k3_requests_cancelled_total", 1)
	_, _, m := ts.do(t, "GET", "/metrics", "")
	if got := metricValue(t, string(m), "k3_tokens_predicted_total"); got >= 1500 {
		t.Errorf("%g tokens: not cancelled", got)
	}
}
