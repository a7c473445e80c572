package server_test

import (
	"context"
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

var errStorage = errors.New("reading expert weights: input/output error")

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

func TestGenerationFails(t *testing.T) {
	sb := &scriptBackend{Backend: tinyBackend(t), reply: "some reasoning that goes on for a while", eog: true}
	s := server.New(server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RequestLog: io.Discard}, failingBackend{sb})
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	h := &testServer{Server: ts, srv: s}
	body := `{"messages":[{"role":"user","content":"x"}]`
	code, _, b := h.do(t, "POST", "/v1/chat/completions", body+`}`)
	if code != 500 || decodeErr(t, b).Error.Type != "server_error" || !strings.Contains(string(b), "input/output error") {
		t.Errorf("whole: %d %s", code, b)
	}
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body+`,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	events := strings.Split(strings.TrimSpace(string(data)), "\n\n")
	last := events[len(events)-1]
	if !strings.HasPrefix(last, `data: {"error":`) || !strings.Contains(last, "input/output error") || strings.Contains(string(data), "[DONE]") {
		t.Errorf("stream should end in an error event, without [DONE]:\n%s", data)
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
