package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/synth"
)

// TestServeRecoversFromFailedRestart is issue 23's first case as a user
// met it: `k3 serve -m copy.gguf --memory-budget 6M -c 1024` with the
// staging-pread and kernels plugins in processes; the model file is moved
// away and the stager killed, so its restart fails; the file comes back.
// The request while the file is gone fails and /health says degraded
// naming the stager; once it is back the server recovers by itself: /health
// ok, and requests answer the tokens of an undisturbed run.
func TestServeRecoversFromFailedRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "copy.gguf")
	cfg, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Type = synth.TypeQ2_K
	if _, err := synth.Write(path, cfg, synth.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	prof, err := config.Load(config.Options{Profile: "auto", ModelPath: path, Flags: map[string]any{
		"memory.budget": "6M", "context": 1024, "stager.name": "pread", "stager.mode": "process"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	be, closer, err := openBackend(ctx, path, prof, 2, false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rm := closer.(closers)[0].(*runtimeModel)
	sup := rm.staged.Supervisor()
	srv := server.New(server.Options{Logger: slog.New(slog.DiscardHandler)}, be)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	complete := func() (int, string) {
		t.Helper()
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"The quick brown fox","max_tokens":12,"temperature":0}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return resp.StatusCode, string(body)
		}
		var r struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if err := json.Unmarshal(body, &r); err != nil || len(r.Choices) != 1 {
			t.Fatalf("completion %s: %v", body, err)
		}
		return 200, r.Choices[0].Text
	}
	health := func() (int, string) {
		t.Helper()
		resp, err := http.Get(ts.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	code, want := complete()
	if code != 200 {
		t.Fatalf("undisturbed request: %d %s", code, want)
	}
	if code, body := health(); code != 200 || body != `{"status":"ok"}`+"\n" {
		t.Fatalf("health before: %d %s", code, body)
	}

	// mv copy.gguf x; kill -9 the staging child.
	if err := os.Rename(path, filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	p := sup.Process()
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !p.Exited(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed stager did not exit")
		}
	}
	if code, body := complete(); code != 500 {
		t.Errorf("request while the file is gone: %d %s, want 500", code, body)
	}
	code, body := health()
	if code != 503 || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, "staging-pread") {
		t.Errorf("health while the stager is down: %d %s", code, body)
	}

	// mv x copy.gguf: the server recovers by itself.
	if err := os.Rename(filepath.Join(dir, "x"), path); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := health(); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			code, body := health()
			t.Fatalf("health after the file came back: %d %s", code, body)
		}
	}
	// A /metrics scrape is the first stager call after the restart: it
	// must not leave the generation on the dead process's mappings.
	if resp, err := http.Get(ts.URL + "/metrics"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	for i := 0; i < 2; i++ {
		if code, got := complete(); code != 200 || got != want {
			t.Errorf("request %d after recovery: %d %q, want %q", i, code, got, want)
		}
	}
	if code, body := health(); code != 200 {
		t.Errorf("health at the end: %d %s", code, body)
	}
	if sup.Restarts() != 1 {
		t.Errorf("%d stager restarts, want 1", sup.Restarts())
	}
}
