package server_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/server/local"
)

// degradable is the tiny backend with a health the test sets.
type degradable struct {
	*local.Backend
	err atomic.Pointer[error]
}

func (d *degradable) Health() error {
	if p := d.err.Load(); p != nil {
		return *p
	}
	return nil
}

// TestHealthDegraded: /health says 503 "Loading model" before the
// backend, 200 ok when it is healthy, and 503 "degraded" with the reason
// while a part of it is down, in llama-server's shapes.
func TestHealthDegraded(t *testing.T) {
	s := server.New(server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	h := &testServer{Server: ts, srv: s}
	type answer struct {
		Status string `json:"status"`
		Error  struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	get := func() (int, answer) {
		code, _, body := h.do(t, "GET", "/health", "")
		var a answer
		if err := json.Unmarshal(body, &a); err != nil {
			t.Fatalf("/health: %v: %s", err, body)
		}
		return code, a
	}
	if code, a := get(); code != 503 || a.Error.Code != 503 || a.Error.Message != "Loading model" || a.Error.Type != "unavailable_error" {
		t.Errorf("while loading: %d %+v", code, a)
	}
	be := &degradable{Backend: tinyBackend(t)}
	s.SetBackend(be)
	if code, a := get(); code != 200 || a.Status != "ok" {
		t.Errorf("healthy: %d %+v", code, a)
	}
	down := errors.New("plugin staging-pread down since 2026-01-02T03:04:05Z")
	be.err.Store(&down)
	if code, a := get(); code != 503 || a.Status != "degraded" || a.Error.Message != down.Error() || a.Error.Type != "unavailable_error" || a.Error.Code != 503 {
		t.Errorf("degraded: %d %+v", code, a)
	}
	be.err.Store(nil)
	if code, a := get(); code != 200 || a.Status != "ok" {
		t.Errorf("recovered: %d %+v", code, a)
	}
}
