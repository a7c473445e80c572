package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/synth"
)

// TestServeRecoversFromFailedRestart is issue 23's first case as a user
// met it: `k3 serve -m copy.gguf --memory-budget 6M -c 1024` with the
// staging-pread and kernels plugins in processes; the model file is moved
// away and the stager killed, so its restart fails; the file comes back.
// The request while the file is gone fails and /health says degraded
// naming the stager; once it is back the server recovers by itself: /health
// ok, and requests answer the tokens of an undisturbed run. staging-mmap
// (whose regions are the model file itself) goes through the same.
func TestServeRecoversFromFailedRestart(t *testing.T) {
	for _, stager := range []string{"pread", "mmap"} {
		t.Run(stager, func(t *testing.T) { recoversFromFailedRestart(t, stager) })
	}
}

func recoversFromFailedRestart(t *testing.T, stager string) {
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
		"memory.budget": "6M", "context": 1024, "threads": 2, "stager.name": stager, "stager.mode": "process"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	be, err := openBackend(ctx, path, prof, false, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	sup := be.Runtime().Staged.Supervisor()
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
	// The stager is down, found so by that request or, where the request
	// failed before it asked the stager (mmap: the kernels could not open
	// the model file), by the supervisor's watch.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body := health()
		if code == 503 && strings.Contains(body, `"status":"degraded"`) && strings.Contains(body, "staging-"+stager) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health while the stager is down: %d %s", code, body)
		}
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

// TestServeKill9LeavesNoPlugins is issue 23's eighth case: `k3 serve -m
// tiny.gguf` killed with SIGKILL. Its stager and kernels processes exit
// by themselves and the shared-memory files of the dead server go.
func TestServeKill9LeavesNoPlugins(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tiny.gguf")
	cfg, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := synth.Write(path, cfg, synth.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	k3 := exec.Command(os.Args[0], "serve", "-m", path, "--host", filepath.Join(dir, "k3.sock"),
		"--memory-budget", "64M", "-c", "256", "-t", "2")
	k3.Env = append(os.Environ(), "K3_TEST_AS_K3=1", "K3_STAGER__NAME=pread", "K3_STAGER__MODE=process", "K3_KERNELS__MODE=process")
	stderr, err := k3.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := k3.Start(); err != nil {
		t.Fatal(err)
	}
	defer k3.Process.Kill()
	var log strings.Builder
	ready := make(chan bool)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !sent && strings.Contains(sc.Text(), "model ready") {
				ready <- true
				sent = true
			}
		}
		if !sent {
			close(ready)
		}
	}()
	if !<-ready {
		t.Fatalf("k3 serve did not get ready:\n%s", log.String())
	}
	plugins := childPids(t, k3.Process.Pid)
	shm := filepath.Join(host.ShmDir(), "k3-*-"+strconv.Itoa(k3.Process.Pid)+"-*")
	files, _ := filepath.Glob(shm)
	if len(plugins) < 2 || len(files) < 2 {
		t.Fatalf("before the kill: plugin processes %v, shared memory %v; want the stager's and the kernels'", plugins, files)
	}
	if err := k3.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	k3.Wait()
	// A generous deadline: the check is that they go at all.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var left []string
		for _, p := range plugins {
			if !gone(p) {
				left = append(left, fmt.Sprint("plugin pid ", p))
			}
		}
		files, _ := filepath.Glob(shm)
		left = append(left, files...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range plugins {
				syscall.Kill(p, syscall.SIGKILL)
			}
			for _, f := range files {
				os.RemoveAll(f)
			}
			t.Fatalf("after kill -9 of the server, still there: %v", left)
		}
	}
}
