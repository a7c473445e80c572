package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/server/local"
)

// TestChoices: n = 3 on chat and completions, streamed and not, returns
// choices 0..2, choice i being what the same request with n = 1 and
// seed + i returns (the prompt evaluated once, the state shared); usage
// counts the prompt once and every choice's tokens; n beyond the slots,
// n < 1 and n on a route without choices are 400s.
func TestChoices(t *testing.T) {
	ts := choicesServer(t)

	const seed = 11
	routes := []struct{ path, body string }{
		{"/v1/chat/completions", `"messages":[{"role":"user","content":"Name three colours."}]`},
		{"/v1/completions", `"prompt":"Three colours:"`},
	}
	for _, r := range routes {
		req := func(n, seed int, stream bool) string {
			return fmt.Sprintf(`{%s,"n":%d,"seed":%d,"temperature":1,"max_tokens":8,"ignore_eos":true,"stream":%v,"stream_options":%s}`,
				r.body, n, seed, stream, map[bool]string{true: `{"include_usage":true}`, false: "null"}[stream])
		}
		var want []string
		for i := range 3 {
			texts, u := choicesOf(t, ts, r.path, req(1, seed+i, false), false)
			if len(texts) != 1 || u.Completion != 8 {
				t.Fatalf("%s n=1: %v %+v", r.path, texts, u)
			}
			want = append(want, texts[0])
		}
		for _, stream := range []bool{false, true} {
			got, u := choicesOf(t, ts, r.path, req(3, seed, stream), stream)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s stream=%v: choices (-each alone +n=3):\n%s", r.path, stream, d)
			}
			if u.Completion != 24 || u.Prompt == 0 || u.Total != u.Prompt+24 {
				t.Errorf("%s stream=%v: usage %+v", r.path, stream, u)
			}
		}
		if cmp.Equal(want[0], want[1]) && cmp.Equal(want[1], want[2]) {
			t.Errorf("%s: choices with seeds %d.. are identical: %q", r.path, seed, want[0])
		}
	}
	for _, c := range []struct{ path, body, msg string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":4}`, "-np 4"},
		{"/v1/completions", `{"prompt":"x","n":0}`, "at least 1"},
		{"/v1/messages", `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}],"n":2}`, "/completion and /infill only"},
		{"/completion", `{"prompt":"x","n_cmpl":4}`, "n_cmpl = 4 is more choices than this server runs at once"},
		{"/v1/completions", `{"prompt":"x","n":2,"n_cmpl":0}`, "n_cmpl = 0 must be at least 1"},
	} {
		code, _, b := ts.do(t, "POST", c.path, c.body)
		if e := decodeErr(t, b); code != 400 || !strings.Contains(e.Error.Message, c.msg) {
			t.Errorf("%s %s: %d %s", c.path, c.body, code, b)
		}
	}
}

// TestNativeChoices: llama-server's /completion takes n_cmpl (and n, which
// n_cmpl overrides): n_cmpl = 3 answers an array of three results, index
// 0..2, result i being what n_cmpl = 1 with seed + i gives; streamed, the
// chunks carry their result's index and each result ends once.
func TestNativeChoices(t *testing.T) {
	ts := choicesServer(t)

	type result struct {
		Index   int     `json:"index"`
		Content string  `json:"content"`
		Tokens  []int32 `json:"tokens"`
		Stop    bool    `json:"stop"`
	}
	const seed = 5
	body := func(n string, seed int, stream bool) string {
		return fmt.Sprintf(`{"prompt":"Three colours:",%s"seed":%d,"temperature":1,"n_predict":6,"ignore_eos":true,"return_tokens":true,"stream":%v}`, n, seed, stream)
	}
	var want []result
	for i := range 3 {
		code, _, b := ts.do(t, "POST", "/completion", body("", seed+i, false))
		var r result
		if code != 200 {
			t.Fatalf("n_cmpl 1: %d %s", code, b)
		}
		decodeTo(t, b, &r)
		if len(r.Tokens) != 6 || !r.Stop {
			t.Fatalf("seed %d: %+v", seed+i, r)
		}
		r.Index = i
		want = append(want, r)
	}
	if cmp.Equal(want[0].Tokens, want[1].Tokens) && cmp.Equal(want[1].Tokens, want[2].Tokens) {
		t.Fatalf("seeds %d.. give the same tokens: %v", seed, want[0].Tokens)
	}
	for _, n := range []string{`"n_cmpl":3,`, `"n":3,`, `"n":1,"n_cmpl":3,`} {
		code, _, b := ts.do(t, "POST", "/completion", body(n, seed, false))
		var got []result
		if code != 200 {
			t.Fatalf("%s: %d %s", n, code, b)
		}
		decodeTo(t, b, &got)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: results (-each alone +together):\n%s", n, d)
		}
	}
	code, _, b := ts.do(t, "POST", "/completion", body(`"n_cmpl":3,`, seed, true))
	if code != 200 {
		t.Fatalf("stream: %d %s", code, b)
	}
	got := make([]result, 3)
	for _, ev := range sseEvents(t, bytes.NewReader(b)) {
		var r result
		if err := json.Unmarshal([]byte(ev), &r); err != nil || r.Index < 0 || r.Index > 2 {
			t.Fatalf("stream: %v: %s", err, ev)
		}
		g := &got[r.Index]
		if g.Stop {
			t.Errorf("stream: result %d goes on after its end: %s", r.Index, ev)
		}
		g.Index, g.Stop = r.Index, r.Stop
		g.Content += r.Content
		if !r.Stop {
			g.Tokens = append(g.Tokens, r.Tokens...)
		} else if !cmp.Equal(r.Tokens, g.Tokens) {
			t.Errorf("stream: result %d ends with tokens %v, its chunks had %v", r.Index, r.Tokens, g.Tokens)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("stream: results (-each alone +together):\n%s", d)
	}
}

type usageCounts struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Total      int `json:"total_tokens"`
}

// choicesOf posts body and returns each choice's text by index (a chat
// message's content, a completion's text; streamed deltas joined) and
// the usage.
func choicesOf(t *testing.T, ts *testServer, path, body string, stream bool) ([]string, usageCounts) {
	t.Helper()
	// A random model's reply may parse as reasoning: both count.
	type msg struct {
		Content   string `json:"content"`
		Reasoning string `json:"reasoning_content"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		Message      *msg    `json:"message"`
		Delta        *msg    `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	}
	type response struct {
		Choices []choice     `json:"choices"`
		Usage   *usageCounts `json:"usage"`
	}
	code, _, b := ts.do(t, "POST", path, body)
	if code != 200 {
		t.Fatalf("%s: %d %s", path, code, b)
	}
	var resps []response
	if stream {
		for _, ev := range sseEvents(t, bytes.NewReader(b)) {
			if ev == "[DONE]" {
				break
			}
			var r response
			if err := json.Unmarshal([]byte(ev), &r); err != nil {
				t.Fatalf("%s: %v: %s", path, err, ev)
			}
			resps = append(resps, r)
		}
	} else {
		var r response
		decodeTo(t, b, &r)
		resps = []response{r}
	}
	var texts, reasoning []string
	var u usageCounts
	finished := map[int]bool{}
	for _, r := range resps {
		if r.Usage != nil {
			u = *r.Usage
		}
		for _, c := range r.Choices {
			for len(texts) <= c.Index {
				texts, reasoning = append(texts, ""), append(reasoning, "")
			}
			switch {
			case c.Message != nil:
				texts[c.Index] += c.Message.Content
				reasoning[c.Index] += c.Message.Reasoning
			case c.Delta != nil:
				texts[c.Index] += c.Delta.Content
				reasoning[c.Index] += c.Delta.Reasoning
			default:
				texts[c.Index] += c.Text
			}
			if c.FinishReason != nil {
				if finished[c.Index] {
					t.Errorf("%s: choice %d finished twice", path, c.Index)
				}
				finished[c.Index] = true
			}
		}
	}
	if len(finished) != len(texts) {
		t.Errorf("%s: %d choices, %d finished", path, len(texts), len(finished))
	}
	for i := range texts {
		texts[i] = reasoning[i] + "|" + texts[i]
	}
	return texts, u
}

// choicesServer is a server of three slots over the tiny model.
func choicesServer(t *testing.T) *testServer {
	t.Helper()
	be, err := local.Open(tinyModel(t), local.Options{Threads: 2, Context: 512, Slots: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	s := server.New(server.Options{Parallel: 3, RequestLog: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, be)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &testServer{Server: hs, srv: s}
}
