package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/server"
)

// streamText runs a streamed completion and returns its text, finish
// reason and completion tokens, or an error.
func streamText(ctx context.Context, url, body string) (text, finish string, tokens int, err error) {
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", "", 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "", 0, err
	}
	events := strings.Split(strings.TrimSpace(string(data)), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		return "", "", 0, fmt.Errorf("stream does not end in [DONE]: %q", events[len(events)-1])
	}
	for _, ev := range events[:len(events)-1] {
		var c struct {
			Choices []struct {
				Text         string
				FinishReason *string `json:"finish_reason"`
			}
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(ev, "data: ")), &c); err != nil {
			return "", "", 0, err
		}
		if c.Usage != nil {
			tokens = c.Usage.CompletionTokens
		}
		for _, ch := range c.Choices {
			text += ch.Text
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
	}
	return text, finish, tokens, nil
}

func waitMetric(t *testing.T, ts *testServer, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _, b := ts.do(t, "GET", "/metrics", "")
		got := metricValue(t, string(b), name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %g, want %g", name, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestConcurrentClients: one client holds the engine while two more
// stream-wait and a fourth is turned away; the first disconnects midway,
// which cancels its generation and frees the engine, and both waiting
// clients then complete exactly as they would alone.
func TestConcurrentClients(t *testing.T) {
	ts := newTestServer(t, server.Options{MaxQueue: 2})
	const n = 40
	body := func(prompt string, max int) string {
		return fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`, prompt, max)
	}
	// ignore_eos: every generation runs to max_tokens. The leaver asks for far more than it will read.
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(body("The leaver", 1500)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("leaver: %v %v", err, resp)
	}
	defer resp.Body.Close()
	waitMetric(t, ts, "k3_requests_processing", 1)

	type result struct {
		text, finish string
		tokens       int
		err          error
	}
	prompts := []string{"First waiting client", "Second waiting client"}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.text, r.finish, r.tokens, r.err = streamText(context.Background(), ts.URL, body(p, n))
		}()
	}
	waitMetric(t, ts, "k3_requests_deferred", 2)
	code, hdr, b := ts.do(t, "POST", "/v1/completions", body("One too many", 5))
	if code != 429 || hdr.Get("Retry-After") == "" || decodeErr(t, b).Error.Type != "rate_limit_error" {
		t.Errorf("full queue: %d Retry-After=%q %s", code, hdr.Get("Retry-After"), b)
	}
	waitMetric(t, ts, "k3_requests_rejected_total", 1)

	// Read a little of the stream, then hang up.
	buf := make([]byte, 512)
	if _, err := io.ReadAtLeast(resp.Body, buf, 200); err != nil {
		t.Fatal(err)
	}
	leave()
	wg.Wait()
	waitMetric(t, ts, "k3_requests_processing", 0)
	waitMetric(t, ts, "k3_requests_deferred", 0)
	waitMetric(t, ts, "k3_requests_total", 3)
	waitMetric(t, ts, "k3_requests_cancelled_total", 1)
	_, _, mb := ts.do(t, "GET", "/metrics", "")
	if got := metricValue(t, string(mb), "k3_tokens_predicted_total"); got >= 2*n+500 {
		t.Errorf("%g tokens generated: the leaver's generation was not cancelled", got)
	}

	for i, r := range results {
		if r.err != nil {
			t.Fatalf("client %d: %v", i, r.err)
		}
		if r.finish != "length" || r.tokens != n {
			t.Errorf("client %d: finish %q after %d tokens, want length after %d", i, r.finish, r.tokens, n)
		}
		// Alone, with nothing else running, the same request gives the same text.
		alone, _, _, err := streamText(context.Background(), ts.URL, body(prompts[i], n))
		if err != nil || alone != r.text {
			t.Errorf("client %d: concurrent text %q, alone %q (%v)", i, r.text, alone, err)
		}
	}
}

// TestWaiterLeaves: a client that gives up while queued frees its place.
func TestWaiterLeaves(t *testing.T) {
	ts := newTestServer(t, server.Options{MaxQueue: 1})
	runner := `{"prompt":"runner","max_tokens":250,"ignore_eos":true}`
	done := make(chan int, 1)
	go func() {
		code, _, _ := ts.do(t, "POST", "/v1/completions", runner)
		done <- code
	}()
	waitMetric(t, ts, "k3_requests_processing", 1)
	ctx, cancel := context.WithCancel(context.Background())
	waiterDone := make(chan struct{})
	go func() {
		defer close(waiterDone)
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"waiter","max_tokens":5}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitMetric(t, ts, "k3_requests_deferred", 1)
	cancel()
	<-waiterDone
	waitMetric(t, ts, "k3_requests_deferred", 0)
	if code := <-done; code != 200 {
		t.Errorf("runner: %d", code)
	}
	// The waiter never ran.
	waitMetric(t, ts, "k3_requests_total", 1)
}
