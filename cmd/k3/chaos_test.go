package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/synth"
)

// TestChaos drives the real `k3 serve` (this test binary acting as k3, its
// plugins real subprocesses) with streaming chat requests while it breaks
// things the way a machine does: kill -9 of each plugin mid-stream, the
// model file moved away while a plugin restarts and moved back, and
// SIGTERM with streams in flight. Every request must end in a well-formed
// response (complete, or an error the client can read), the server must
// heal by itself once the cause is gone, and a SIGTERM must end every
// stream with a final chunk and [DONE], stop the plugins and remove the
// shared-memory files. The summary (requests, outcomes, recovery times)
// is logged; K3_CHAOS_REPORT names a file to write it to as well.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers and plugins")
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "copy.gguf")
	cfg, _ := synth.Preset("tiny")
	cfg.Type = synth.TypeQ2_K
	if _, err := synth.Write(model, cfg, synth.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A budget far below the model, so experts stream from the file through
	// the stager and a restarted stager must open the file again.
	srv := startServe(t, "-m", model, "--memory-budget", "8M", "-c", "1024", "-t", "2", "--shutdown-grace", "700ms")
	sum := &chaosSummary{}
	defer func() {
		t.Log("chaos summary:\n" + sum.String())
		if p := os.Getenv("K3_CHAOS_REPORT"); p != "" {
			os.WriteFile(p, []byte(sum.String()), 0o644)
		}
	}()

	ref := srv.chat(t, 96, false)
	if !ref.complete() {
		t.Fatalf("reference request: %s", ref)
	}
	sum.add("reference", ref, true)

	// 1-2: a plugin killed mid-stream is restarted and the step re-issued:
	// the streams finish with the undisturbed text.
	for _, plug := range []string{"staging-pread", "kernels-avx512"} {
		pid := srv.child(t, plug)
		if pid == 0 {
			t.Fatalf("no %s child of the server", plug)
		}
		rs := srv.streams(2, 96, func() {
			syscall.Kill(pid, syscall.SIGKILL)
		})
		for _, r := range rs {
			ok := r.complete() && r.Text == ref.Text
			sum.add("kill -9 "+plug+" mid-stream", r, ok)
			if !ok {
				t.Errorf("kill -9 %s: stream %s; want the undisturbed text %q", plug, r, ref.Text)
			}
		}
		sum.recover("kill -9 "+plug, srv.waitServes(t, time.Now(), 20*time.Second))
	}

	// 3-4: the model moved away while a plugin restarts: requests fail with
	// a readable error, /health says degraded; once the file is back the
	// server recovers by itself.
	for _, plug := range []string{"staging-pread", "kernels-avx512"} {
		aside := model + ".aside"
		if err := os.Rename(model, aside); err != nil {
			t.Fatal(err)
		}
		pid := srv.child(t, plug)
		syscall.Kill(pid, syscall.SIGKILL)
		waitGone(pid, 5*time.Second)
		// The stager must open the file to restart, so its requests fail;
		// the kernels plugin maps what the stager staged (in shared memory)
		// and may serve on: either way the answer is well-formed, and a
		// complete one is the undisturbed text.
		r := srv.chat(t, 96, true)
		ok := r.wellFormed() && (!r.complete() || r.Text == ref.Text) && (plug != "staging-pread" || !r.complete())
		sum.add("model moved, kill -9 "+plug, r, ok)
		if !ok {
			t.Errorf("model moved away, %s killed: %s; want a well-formed error (or, for kernels, the undisturbed text)", plug, r)
		}
		if plug == "staging-pread" && !strings.Contains(r.ErrMsg, "the staging backend (plugin staging-pread) failed") {
			t.Errorf("the error does not say which backend failed: %q", r.ErrMsg)
		}
		if bytes.Contains([]byte(r.Raw), []byte(dir)) {
			t.Errorf("the error shows the model's path to the client: %s", r.Raw)
		}
		h := srv.health()
		sum.note(fmt.Sprintf("/health, model away, %s killed: %d %s", plug, h.code, strings.TrimSpace(h.body)))
		if h.code == http.StatusOK && !r.complete() {
			t.Errorf("/health says %d %s with %s unable to restart", h.code, h.body, plug)
		}
		if err := os.Rename(aside, model); err != nil {
			t.Fatal(err)
		}
		back := time.Now()
		rec := srv.waitServes(t, back, 30*time.Second)
		sum.recover("model back (it was away during kill -9 "+plug+")", rec)
		if rec < 0 {
			t.Fatalf("the server did not recover within 30s of the model coming back; log:\n%s", srv.log.String())
		}
		r = srv.chat(t, 96, true)
		ok = r.complete() && r.Text == ref.Text
		sum.add("after recovery ("+plug+")", r, ok)
		if !ok {
			t.Errorf("after recovery: %s; want the undisturbed text", r)
		}
		if h := srv.health(); h.code != http.StatusOK {
			t.Errorf("/health after recovery: %d %s", h.code, h.body)
		}
	}

	// 5: SIGTERM with streams running: each ends with a final chunk that
	// has a finish_reason and [DONE] (or, queued, a clean 503), the process
	// exits 0, its plugins are gone and so are its shared-memory files.
	kids := []int{srv.child(t, "staging-pread"), srv.child(t, "kernels-avx512")}
	logFrom := 0
	rs := srv.streams(2, 900, func() {
		logFrom = len(srv.log.String())
		srv.cmd.Process.Signal(syscall.SIGTERM)
	})
	for _, r := range rs {
		ok := r.wellFormed() && (r.Status != http.StatusOK || (r.Done && r.Finish != ""))
		sum.add("SIGTERM mid-stream", r, ok)
		if !ok {
			t.Errorf("SIGTERM: stream %s; want a final chunk with finish_reason and [DONE]", r)
		}
	}
	code, waited := srv.waitExit(15 * time.Second)
	sum.recover("SIGTERM to exit", waited)
	if code != 0 {
		t.Errorf("k3 serve exited %d after SIGTERM; log:\n%s", code, srv.log)
	}
	srv.plugins = kids
	srv.checkClean(t, logFrom)
}

type healthAnswer struct {
	code int
	body string
}

func (s *serveProc) health() healthAnswer {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(s.url + "/health")
	if err != nil {
		return healthAnswer{0, err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return healthAnswer{resp.StatusCode, string(b)}
}

// waitServes polls until a short request completes and /health is 200, and
// returns how long after since that was (-1s if not within limit).
func (s *serveProc) waitServes(t *testing.T, since time.Time, limit time.Duration) time.Duration {
	for time.Since(since) < limit {
		if r := s.chat(t, 2, false); r.complete() && s.health().code == http.StatusOK {
			return time.Since(since)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return -time.Second
}

// chatResult is what a client saw of one chat completion.
type chatResult struct {
	Status  int
	Stream  bool
	Text    string
	Finish  string
	Done    bool   // the stream ended with data: [DONE]
	ErrMsg  string // an error object, in the body or as a stream event
	Broken  string // why the response was not well-formed
	Raw     string // the body (non-streaming) or the last event
	Elapsed time.Duration
	// FirstGap is the longest pause between two stream events.
	MaxGap time.Duration
}

func (r *chatResult) complete() bool {
	return r.Broken == "" && r.Status == http.StatusOK && r.ErrMsg == "" && r.Finish != "" && (!r.Stream || r.Done)
}

// wellFormed: parseable to the end, and either complete or an error the
// client can read (an error body, or an error event).
func (r *chatResult) wellFormed() bool {
	if r.Broken != "" {
		return false
	}
	if r.Status != http.StatusOK {
		return r.ErrMsg != ""
	}
	return r.complete() || r.ErrMsg != ""
}

func (r *chatResult) String() string {
	return fmt.Sprintf("status=%d stream=%v finish=%q done=%v err=%q broken=%q text=%d bytes elapsed=%v max-gap=%v last=%.200s",
		r.Status, r.Stream, r.Finish, r.Done, r.ErrMsg, r.Broken, len(r.Text), r.Elapsed.Round(time.Millisecond), r.MaxGap.Round(time.Millisecond), r.Raw)
}

// chat sends one greedy chat completion of up to n tokens.
func (s *serveProc) chat(t *testing.T, n int, stream bool) *chatResult {
	return s.chatStarted(n, stream, nil)
}

// streams runs k streaming requests at once; fault runs once the first of
// them has produced some tokens.
func (s *serveProc) streams(k, n int, fault func()) []*chatResult {
	out := make([]*chatResult, k)
	first := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.chatStarted(n, true, func(events int) {
				if events == 8 {
					once.Do(func() { close(first) })
				}
			})
		}()
	}
	select {
	case <-first:
		fault()
	case <-time.After(30 * time.Second):
		fault()
	}
	wg.Wait()
	return out
}

func (s *serveProc) chatStarted(n int, stream bool, onEvent func(int)) *chatResult {
	body, _ := json.Marshal(map[string]any{
		"messages":    []map[string]string{{"role": "user", "content": "Tell me a long story about a lighthouse."}},
		"max_tokens":  n,
		"temperature": 0,
		"stream":      stream,
	})
	r := &chatResult{Stream: stream}
	start := time.Now()
	defer func() { r.Elapsed = time.Since(start) }()
	c := http.Client{Timeout: 60 * time.Second}
	resp, err := c.Post(s.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		r.Broken = err.Error()
		return r
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	ct := resp.Header.Get("Content-Type")
	if !strings.HasPrefix(ct, "text/event-stream") {
		b, err := io.ReadAll(resp.Body)
		r.Raw = string(b)
		if err != nil {
			r.Broken = "reading the body: " + err.Error()
			return r
		}
		var v struct {
			Choices []struct {
				Message      struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
			Error *struct{ Message string }
		}
		if err := json.Unmarshal(b, &v); err != nil {
			r.Broken = "body is not JSON: " + err.Error()
			return r
		}
		if v.Error != nil {
			r.ErrMsg = v.Error.Message
			if r.ErrMsg == "" {
				r.ErrMsg = "(empty message)"
			}
		}
		if len(v.Choices) > 0 {
			r.Text = v.Choices[0].Message.Content
			if v.Choices[0].FinishReason != nil {
				r.Finish = *v.Choices[0].FinishReason
			}
		}
		if r.Status == http.StatusOK && r.ErrMsg == "" && r.Finish == "" {
			r.Broken = "a 200 answer without finish_reason"
		}
		return r
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var text strings.Builder
	events := 0
	last := time.Now()
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if gap := time.Since(last); gap > r.MaxGap && events > 0 {
			r.MaxGap = gap
		}
		last = time.Now()
		data := strings.TrimPrefix(line, "data: ")
		if r.Done {
			r.Broken = "an event after [DONE]"
			break
		}
		if data == "[DONE]" {
			r.Done = true
			continue
		}
		r.Raw = data
		events++
		if onEvent != nil {
			onEvent(events)
		}
		var ev struct {
			Choices []struct {
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
			Error *struct{ Message string }
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			r.Broken = "an event is not JSON: " + err.Error()
			break
		}
		if ev.Error != nil {
			r.ErrMsg = ev.Error.Message
			if r.ErrMsg == "" {
				r.ErrMsg = "(empty message)"
			}
		}
		for _, ch := range ev.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != nil {
				r.Finish = *ch.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil && r.Broken == "" {
		r.Broken = "the stream broke: " + err.Error()
	}
	r.Text = text.String()
	if r.Broken == "" && !r.Done && r.ErrMsg == "" {
		r.Broken = "the stream ended without [DONE] or an error event"
	}
	return r
}

// chaosSummary collects what TestChaos saw, for its log and the note.
type chaosSummary struct {
	mu    sync.Mutex
	lines []string
	n, ok int
}

func (c *chaosSummary) add(phase string, r *chatResult, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	verdict := "FAIL"
	if ok {
		c.ok++
		verdict = "ok"
	}
	outcome := "complete"
	switch {
	case r.Broken != "":
		outcome = "broken: " + r.Broken
	case r.Status != http.StatusOK:
		outcome = fmt.Sprintf("HTTP %d error: %s", r.Status, r.ErrMsg)
	case r.ErrMsg != "":
		outcome = "error event: " + r.ErrMsg
	case r.Stream:
		outcome = fmt.Sprintf("complete, finish=%s, [DONE]=%v", r.Finish, r.Done)
	default:
		outcome = "complete, finish=" + r.Finish
	}
	c.lines = append(c.lines, fmt.Sprintf("%-4s %-40s %s (%v, longest pause %v)", verdict, phase, outcome,
		r.Elapsed.Round(time.Millisecond), r.MaxGap.Round(time.Millisecond)))
}

func (c *chaosSummary) recover(what string, d time.Duration) {
	c.note(fmt.Sprintf("recovery: %-40s %v", what, d.Round(time.Millisecond)))
}

func (c *chaosSummary) note(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, s)
}

func (c *chaosSummary) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%s\nrequests: %d, as expected: %d\n", strings.Join(c.lines, "\n"), c.n, c.ok)
}
