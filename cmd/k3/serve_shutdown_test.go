package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/plugin/host"
)

// streamEvents posts a streaming completion and returns a function that
// reads the rest of the stream: its data events, and an error if the body
// did not end cleanly (curl's exit 18).
func streamEvents(t *testing.T, url string, maxTokens int) func() ([]string, error) {
	t.Helper()
	body := fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":%d,"stream":true,"ignore_eos":true}`, maxTokens)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	r := bufio.NewReader(resp.Body)
	var events []string
	read := func() error {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if err == io.EOF && line == "" {
					return io.EOF
				}
				return fmt.Errorf("after %d events: %w", len(events), err)
			}
			if line = strings.TrimSpace(line); line != "" {
				events = append(events, strings.TrimPrefix(line, "data: "))
				return nil
			}
		}
	}
	if err := read(); err != nil { // the first token is out: the generation runs
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { // a client that keeps reading
		defer resp.Body.Close()
		for {
			if err := read(); err != nil {
				done <- err
				return
			}
		}
	}()
	return func() ([]string, error) {
		if err := <-done; err != io.EOF {
			return events, err
		}
		return events, nil
	}
}

// lastChunk returns the finish_reason and error of the event before [DONE].
func lastChunk(t *testing.T, events []string) (finish string, errObj map[string]any) {
	t.Helper()
	if len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end in a chunk and [DONE]: %q", events[max(len(events)-3, 0):])
	}
	var c struct {
		Choices []struct {
			FinishReason *string `json:"finish_reason"`
		}
		Error map[string]any
	}
	if err := json.Unmarshal([]byte(events[len(events)-2]), &c); err != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason == nil {
		t.Fatalf("last chunk has no finish_reason (%v): %s", err, events[len(events)-2])
	}
	return *c.Choices[0].FinishReason, c.Error
}

// TestServeShutdown signals a real `k3 serve` with its plugin processes
// the way a terminal (Ctrl-C: SIGINT to the process group) and systemd
// (SIGTERM to every process) do: a stream that the grace period covers
// completes, one it does not cover (or that a second Ctrl-C cuts short)
// ends with a final chunk and [DONE]; the server exits 0, no plugin is
// restarted or outlives it, and its shared-memory files are gone.
func TestServeShutdown(t *testing.T) {
	path, _ := tinyModel(t)
	for _, tc := range []struct {
		name       string
		sig        syscall.Signal
		grace      string
		signals    int
		maxTokens  int // 0: no request
		wantFinish string
	}{
		{"idle", syscall.SIGTERM, "10s", 1, 0, ""},
		{"SIGINT ends the stream", syscall.SIGINT, "0s", 1, 1500, "stop"},
		{"SIGTERM within the grace period", syscall.SIGTERM, "5m", 1, 100, "length"},
		{"SIGTERM past the grace period", syscall.SIGTERM, "1s", 1, 1500, "stop"},
		{"second Ctrl-C ends the grace period", syscall.SIGINT, "5m", 2, 1500, "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startServe(t, "-m", path, "-c", "2048", "-t", "2", "--shutdown-grace", tc.grace)
			var rest func() ([]string, error)
			if tc.maxTokens > 0 {
				rest = streamEvents(t, p.url, tc.maxTokens)
			}
			code, took := p.signalAndWait(t, tc.sig, tc.signals)
			t.Logf("exit %d %v after %v; plugins %v", code, tc.sig, took, p.plugins)
			if code != 0 {
				t.Errorf("exit code %d:\n%s", code, p.log)
			}
			if rest != nil {
				events, err := rest()
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				finish, errObj := lastChunk(t, events)
				if finish != tc.wantFinish || (errObj != nil) != (tc.wantFinish == "stop") {
					t.Errorf("stream ended with finish_reason %q, error %v", finish, errObj)
				}
			}
			p.checkClean(t, 0)
		})
	}
}

// TestPluginSIGTERMWithoutHost: a plugin ignores SIGTERM only while its
// host lives; once the host is gone (kill -9), SIGTERM ends it as usual.
func TestPluginSIGTERMWithoutHost(t *testing.T) {
	path, _ := tinyModel(t)
	p := startServe(t, "-m", path, "-c", "2048", "-t", "2")
	hostPid := p.cmd.Process.Pid
	t.Cleanup(func() {
		left, _ := filepath.Glob(filepath.Join(host.ShmDir(), fmt.Sprintf("k3-*-%d-*", hostPid)))
		for _, f := range left {
			os.RemoveAll(f)
		}
	})
	if len(p.plugins) == 0 {
		t.Skip("no plugin processes")
	}
	for _, pid := range p.plugins {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	// A generation runs on both plugins, which therefore still serve it.
	resp, err := http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, pid := range p.plugins {
		if resp.StatusCode != 200 || gone(pid) || strings.Contains(p.log.String(), "restarting") {
			t.Fatalf("plugin %d died of SIGTERM while its host lives (request: %d):\n%s", pid, resp.StatusCode, p.log)
		}
	}
	syscall.Kill(hostPid, syscall.SIGKILL)
	<-p.exited
	for _, pid := range p.plugins {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		alive := 0
		for _, pid := range p.plugins {
			if !gone(pid) {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d plugin processes outlive SIGTERM after their host died", alive)
		}
	}
}
