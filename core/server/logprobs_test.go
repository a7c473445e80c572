package server_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/server"
)

type lpEntry struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	} `json:"top_logprobs"`
}

type chatLP struct {
	Choices []struct {
		Logprobs *struct {
			Content []lpEntry `json:"content"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

// checkEntries: probabilities in [0, 1], alternatives sorted, and with
// greedy sampling the chosen token is the likeliest.
func checkEntries(t *testing.T, es []lpEntry, top int, greedy bool) {
	t.Helper()
	for i, e := range es {
		if p := math.Exp(e.Logprob); !(p >= 0 && p <= 1) || e.Logprob > 1e-6 {
			t.Fatalf("entry %d %q: logprob %g", i, e.Token, e.Logprob)
		}
		if len(e.TopLogprobs) != top {
			t.Fatalf("entry %d: %d alternatives, want %d", i, len(e.TopLogprobs), top)
		}
		var sum float64
		for k, a := range e.TopLogprobs {
			sum += math.Exp(a.Logprob)
			if k > 0 && a.Logprob > e.TopLogprobs[k-1].Logprob {
				t.Fatalf("entry %d: alternatives not sorted: %+v", i, e.TopLogprobs)
			}
		}
		if sum > 1+1e-5 {
			t.Fatalf("entry %d: alternatives' probabilities sum to %g", i, sum)
		}
		if greedy && top > 0 {
			found := false
			for _, a := range e.TopLogprobs {
				found = found || (a.Token == e.Token && a.Logprob == e.Logprob)
			}
			if !found || e.TopLogprobs[0].Logprob != e.Logprob {
				t.Fatalf("entry %d: greedy token %q (%g) is not the first alternative: %+v", i, e.Token, e.Logprob, e.TopLogprobs)
			}
		}
	}
}

func TestChatLogprobs(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	body := `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"temperature":0,"logprobs":true,"top_logprobs":5,"chat_template_kwargs":{"thinking":false}`
	code, _, b := ts.do(t, "POST", "/v1/chat/completions", body+"}")
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	var r chatLP
	if err := json.Unmarshal(b, &r); err != nil || r.Choices[0].Logprobs == nil {
		t.Fatalf("no logprobs: %v %s", err, b)
	}
	whole := r.Choices[0].Logprobs.Content
	if len(whole) == 0 || len(whole) > r.Usage.CompletionTokens {
		t.Fatalf("%d entries for %d tokens", len(whole), r.Usage.CompletionTokens)
	}
	checkEntries(t, whole, 5, true)
	// Streamed: the chunks' entries together are the whole reply's.
	var streamed []lpEntry
	for _, ev := range postStream(t, ts.URL+"/v1/chat/completions", body+`,"stream":true}`) {
		if ev == "[DONE]" {
			continue
		}
		var c chatLP
		_ = json.Unmarshal([]byte(ev), &c)
		if len(c.Choices) > 0 && c.Choices[0].Logprobs != nil {
			streamed = append(streamed, c.Choices[0].Logprobs.Content...)
		}
	}
	if len(streamed) != len(whole) {
		t.Fatalf("streamed %d entries, whole %d", len(streamed), len(whole))
	}
	for i := range whole {
		if streamed[i].Token != whole[i].Token || math.Abs(streamed[i].Logprob-whole[i].Logprob) > 1e-6 {
			t.Fatalf("entry %d: streamed %+v whole %+v", i, streamed[i], whole[i])
		}
	}
	// Sampling (not greedy) and no alternatives.
	code, _, b = ts.do(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"seed":4,"temperature":1.5,"logprobs":true}`)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	r = chatLP{}
	_ = json.Unmarshal(b, &r)
	checkEntries(t, r.Choices[0].Logprobs.Content, 0, false)
	// Off: null.
	_, _, b = ts.do(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}`)
	if !strings.Contains(string(b), `"logprobs":null`) {
		t.Errorf("logprobs not asked for: %s", b)
	}
	for _, bad := range []string{`"top_logprobs":3`, `"logprobs":true,"top_logprobs":21`, `"logprobs":false,"top_logprobs":2`} {
		code, _, b := ts.do(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],`+bad+`}`)
		if code != 400 || !strings.Contains(string(b), "top_logprobs") {
			t.Errorf("%s: %d %s", bad, code, b)
		}
	}
}

type cmplLP struct {
	Choices []struct {
		Text     string `json:"text"`
		Logprobs *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func TestCompletionLogprobsAndEcho(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	for _, echo := range []bool{false, true} {
		body := `{"prompt":"The capital of France is","max_tokens":6,"temperature":0,"logprobs":3`
		if echo {
			body += `,"echo":true`
		}
		code, _, b := ts.do(t, "POST", "/v1/completions", body+"}")
		if code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		var r cmplLP
		if err := json.Unmarshal(b, &r); err != nil || r.Choices[0].Logprobs == nil {
			t.Fatalf("%v %s", err, b)
		}
		lp, text := r.Choices[0].Logprobs, r.Choices[0].Text
		n := len(lp.Tokens)
		if len(lp.TokenLogprobs) != n || len(lp.TopLogprobs) != n || len(lp.TextOffset) != n {
			t.Fatalf("lists of different lengths: %+v", lp)
		}
		// Tokens that split a character show its complete part only, so
		// offsets (in bytes of the text) are checked for order and range.
		for i := range n {
			if lp.TextOffset[i] > len(text) || (i > 0 && lp.TextOffset[i] <= lp.TextOffset[i-1]) || (i == 0 && lp.TextOffset[0] != 0) {
				t.Fatalf("echo %v: token %d %q at offset %d (text %q, offsets %v)", echo, i, lp.Tokens[i], lp.TextOffset[i], text, lp.TextOffset)
			}
			if i == 0 && echo {
				if lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil {
					t.Errorf("the first prompt token has a logprob: %v %v", lp.TokenLogprobs[0], lp.TopLogprobs[0])
				}
				continue
			}
			v := *lp.TokenLogprobs[i]
			if v > 1e-6 || math.Exp(v) < 0 || len(lp.TopLogprobs[i]) == 0 || len(lp.TopLogprobs[i]) > 3 {
				t.Fatalf("token %d: logprob %g, top %v", i, v, lp.TopLogprobs[i])
			}
			best := math.Inf(-1)
			for _, a := range lp.TopLogprobs[i] {
				best = max(best, a)
			}
			generated := !echo || i >= r.Usage.PromptTokens
			if v > best+1e-9 || (generated && v != best) {
				t.Fatalf("token %d (%q): logprob %g, best alternative %g (greedy picks the best)", i, lp.Tokens[i], v, best)
			}
		}
		if echo {
			if n != r.Usage.PromptTokens+r.Usage.CompletionTokens && n != r.Usage.PromptTokens+r.Usage.CompletionTokens-1 {
				t.Errorf("%d entries for %d prompt and %d generated tokens", n, r.Usage.PromptTokens, r.Usage.CompletionTokens)
			}
			if !strings.Contains(text[:lp.TextOffset[r.Usage.PromptTokens]], "The capital of France is") {
				t.Errorf("echoed text %q does not start with the prompt", text)
			}
		}
	}
	// Echo streamed: the first chunk holds the prompt.
	evs := postStream(t, ts.URL+"/v1/completions", `{"prompt":"Hello","max_tokens":3,"echo":true,"stream":true}`)
	var first cmplLP
	_ = json.Unmarshal([]byte(evs[0]), &first)
	if !strings.HasSuffix(first.Choices[0].Text, "Hello") && !strings.Contains(first.Choices[0].Text, "Hello") {
		t.Errorf("first streamed chunk %s does not echo the prompt", evs[0])
	}
}
