package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/server/local"
)

// TestParallelSlots: with two slots two requests run at once (a third
// waits), /slots reports both busy and then the tokens each holds, and a
// conversation's next turn reports its previous prompt as cached.
func TestParallelSlots(t *testing.T) {
	be, err := local.Open(tinyModel(t), local.Options{Threads: 2, Context: 2048, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	s := server.New(server.Options{Parallel: 2, MaxQueue: 2, RequestLog: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, be)
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	ts := &testServer{Server: hs, srv: s}

	body := func(prompt string, max int) string {
		return fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0,"stream":true,"ignore_eos":true}`, prompt, max)
	}
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	for _, p := range []string{"First long runner", "Second long runner"} {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(body(p, 1500)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", err, resp)
		}
		defer resp.Body.Close()
	}
	waitMetric(t, ts, "k3_requests_processing", 2)
	var slots []map[string]any
	code, _, b := ts.do(t, "GET", "/slots", "")
	decodeTo(t, b, &slots)
	if code != 200 || len(slots) != 2 || slots[0]["is_processing"] != true || slots[1]["is_processing"] != true {
		t.Errorf("/slots while both run: %d %s", code, b)
	}
	if code, _, _ := ts.do(t, "GET", "/slots?fail_on_no_slot=1", ""); code != 503 {
		t.Errorf("/slots?fail_on_no_slot=1 with every slot busy: %d", code)
	}
	leave()
	waitMetric(t, ts, "k3_requests_processing", 0)

	// A conversation's second turn reuses its first prompt.
	chat := func(msgs string) (prompt, cached int) {
		code, _, b := ts.do(t, "POST", "/v1/chat/completions", `{"messages":`+msgs+`,"max_tokens":3,"temperature":0}`)
		var r struct {
			Usage struct {
				PromptTokens  int `json:"prompt_tokens"`
				PromptDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			}
		}
		decodeTo(t, b, &r)
		if code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		return r.Usage.PromptTokens, r.Usage.PromptDetails.CachedTokens
	}
	first, _ := chat(`[{"role":"user","content":"Hello there"}]`)
	_, cached := chat(`[{"role":"user","content":"Hello there"},{"role":"assistant","content":"Hi."},{"role":"user","content":"And again"}]`)
	if cached < first-1 {
		t.Errorf("second turn cached %d tokens of a first prompt of %d", cached, first)
	}
	code, _, b = ts.do(t, "GET", "/slots", "")
	slots = nil
	decodeTo(t, b, &slots)
	held := 0.0
	for _, sl := range slots {
		held += sl["n_tokens"].(float64)
	}
	if code != 200 || held == 0 {
		t.Errorf("/slots after the requests: %s", b)
	}
}
