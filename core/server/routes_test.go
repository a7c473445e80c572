package server_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/server"
)

func TestModels(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	for _, path := range []string{"/v1/models", "/models"} {
		code, _, body := ts.do(t, "GET", path, "")
		var got struct {
			Object string `json:"object"`
			Data   []struct {
				ID, Object, OwnedBy string
				Meta                map[string]any `json:"meta"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &got); err != nil || code != 200 {
			t.Fatalf("%s: %d %v %s", path, code, err, body)
		}
		if got.Object != "list" || len(got.Data) != 1 || got.Data[0].ID != "tiny" || got.Data[0].Object != "model" ||
			got.Data[0].Meta["n_vocab"] != float64(1024) || got.Data[0].Meta["n_ctx"] != float64(2048) {
			t.Errorf("%s: %s", path, body)
		}
	}
}

func TestTokenize(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	be := tinyBackend(t)
	text := "Hello <|open|>world"
	withSpecial, _ := be.Tokenize(text, false, true)
	plain, _ := be.Tokenize(text, false, false)
	if cmp.Equal(withSpecial, plain) {
		t.Fatal("test text does not exercise parse_special")
	}
	tests := []struct {
		name, body string
		want       []int32
	}{
		{"default parses specials", `{"content":"Hello <|open|>world"}`, withSpecial},
		{"parse_special false", `{"content":"Hello <|open|>world","parse_special":false}`, plain},
		{"no content", `{}`, []int32{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := ts.do(t, "POST", "/tokenize", tt.body)
			var got struct{ Tokens []int32 }
			if err := json.Unmarshal(body, &got); err != nil || code != 200 {
				t.Fatalf("%d %v %s", code, err, body)
			}
			if d := cmp.Diff(tt.want, got.Tokens); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	t.Run("with_pieces and detokenize round trip", func(t *testing.T) {
		_, _, body := ts.do(t, "POST", "/tokenize", `{"content":"Hello <|open|>world","with_pieces":true}`)
		var got struct {
			Tokens []struct {
				ID    int32 `json:"id"`
				Piece any   `json:"piece"`
			}
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		var ids []int32
		var joined string
		for _, p := range got.Tokens {
			ids = append(ids, p.ID)
			joined += p.Piece.(string)
		}
		if !cmp.Equal(ids, withSpecial) || joined != text {
			t.Errorf("pieces %s", body)
		}
		b, _ := json.Marshal(map[string][]int32{"tokens": ids})
		code, _, out := ts.do(t, "POST", "/detokenize", string(b))
		var dt struct{ Content string }
		if err := json.Unmarshal(out, &dt); code != 200 || err != nil || dt.Content != text {
			t.Errorf("detokenize: %d %s", code, out)
		}
	})
}

// metricValue reads one unlabelled sample from Prometheus text.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("metric %s missing:\n%s", name, text)
	}
	var v float64
	if err := json.Unmarshal([]byte(m[1]), &v); err != nil {
		t.Fatalf("metric %s = %q", name, m[1])
	}
	return v
}

func TestMetricsAndStatus(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	code, hdr, body := ts.do(t, "GET", "/metrics", "")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("%d %s", code, hdr.Get("Content-Type"))
	}
	for _, name := range []string{"prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total", "tokens_predicted_seconds_total",
		"prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing", "requests_deferred", "expert_cache_hits_total",
		"expert_cache_misses_total", "storage_read_bytes_total", "storage_wait_seconds_total", "resident_bytes", "memory_budget_bytes"} {
		if !strings.Contains(string(body), "# TYPE k3_"+name+" ") {
			t.Errorf("no k3_%s", name)
		}
	}
	before := metricValue(t, string(body), "k3_tokens_predicted_total")
	if code, _, b := ts.do(t, "POST", "/v1/completions", `{"prompt":"Hello there","max_tokens":4,"logit_bias":[[0,false]]}`); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	_, _, body = ts.do(t, "GET", "/metrics", "")
	m := string(body)
	if got := metricValue(t, m, "k3_tokens_predicted_total") - before; got < 1 || got > 4 {
		t.Errorf("tokens_predicted grew by %g, want 1..4", got)
	}
	if metricValue(t, m, "k3_resident_bytes") <= 0 || metricValue(t, m, "k3_memory_budget_bytes") != 1<<30 {
		t.Errorf("memory metrics: %s", m)
	}
	_, _, body = ts.do(t, "GET", "/status", "")
	var st map[string]any
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st["ready"] != true || st["model"] != "tiny" || st["last_decode_tokens_per_second"].(float64) <= 0 ||
		st["last_prefill_tokens_per_second"].(float64) <= 0 || st["resident_bytes"].(float64) <= 0 {
		t.Errorf("status: %s", body)
	}
}

func TestCompletions(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	be := tinyBackend(t)
	toks, _ := be.Tokenize("The weather today", false, false)
	tb, _ := json.Marshal(toks)
	// Greedy, so the text and token prompts must agree.
	base := `"max_tokens":12,"temperature":0`
	var first string
	for _, prompt := range []string{`"The weather today"`, string(tb), `[` + string(tb) + `]`} {
		code, _, body := ts.do(t, "POST", "/v1/completions", `{"prompt":`+prompt+`,`+base+`}`)
		var r struct {
			Object  string
			Choices []struct {
				Text         string
				FinishReason string `json:"finish_reason"`
			}
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal(body, &r); err != nil || code != 200 || r.Object != "text_completion" {
			t.Fatalf("%d %v %s", code, err, body)
		}
		if r.Usage.PromptTokens != len(toks) {
			t.Errorf("prompt %s: %d prompt tokens, want %d", prompt, r.Usage.PromptTokens, len(toks))
		}
		if first == "" {
			first = r.Choices[0].Text
		} else if r.Choices[0].Text != first {
			t.Errorf("prompt %s: %q, want %q", prompt, r.Choices[0].Text, first)
		}
	}
	// The stream carries the same text, cut by a stop string found in it.
	stop := []rune(first)
	if len(stop) < 4 {
		t.Skipf("greedy text %q too short to cut", first)
	}
	cut := string(stop[2:4])
	want := first[:strings.Index(first, cut)]
	sb, _ := json.Marshal(cut)
	events := postStream(t, ts.URL+"/v1/completions", `{"prompt":"The weather today",`+base+`,"stream":true,"stop":`+string(sb)+`,"stream_options":{"include_usage":true}}`)
	var got, finish string
	for _, ev := range events[:len(events)-2] {
		var c struct {
			Choices []struct {
				Text         string
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		got += c.Choices[0].Text
		if c.Choices[0].FinishReason != nil {
			finish = *c.Choices[0].FinishReason
		}
	}
	if got != want || finish != "stop" {
		t.Errorf("stop %q: streamed %q (%s), want %q (stop)", cut, got, finish, want)
	}
	if !strings.Contains(events[len(events)-2], `"usage"`) || events[len(events)-1] != "[DONE]" {
		t.Errorf("stream tail: %q", events[len(events)-2:])
	}
}

// TestPrefixReuse: a prompt that extends the sequence the engine holds is
// evaluated from where it left off, and usage says how much was reused.
func TestPrefixReuse(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	be := tinyBackend(t)
	toks, _ := be.Tokenize("A long shared beginning of a conversation", false, false)
	more := append(append([]int32{}, toks...), 300, 301)
	cached := func(prompt []int32) int {
		b, _ := json.Marshal(prompt)
		// max_tokens 1: the sampled token is not fed back, so the sequence
		// ends exactly at the prompt.
		code, _, body := ts.do(t, "POST", "/v1/completions", `{"prompt":`+string(b)+`,"max_tokens":1}`)
		var r struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			}
			Timings struct {
				CacheN  int `json:"cache_n"`
				PromptN int `json:"prompt_n"`
			}
		}
		if err := json.Unmarshal(body, &r); err != nil || code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		if r.Timings.CacheN != r.Usage.Details.Cached || r.Timings.PromptN != len(prompt)-r.Timings.CacheN {
			t.Errorf("timings %+v disagree with usage %+v", r.Timings, r.Usage)
		}
		return r.Usage.Details.Cached
	}
	other := []int32{400, 401, 402}
	for _, tt := range []struct {
		name   string
		prompt []int32
		want   int
	}{
		{"unrelated", other, 0},
		{"fresh", toks, 0},
		{"same again", toks, len(toks)},
		{"extended", more, len(toks)},
		{"diverging", toks[:3], 0},
	} {
		if got := cached(tt.prompt); got != tt.want {
			t.Errorf("%s: cached %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestWebPage(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	for _, f := range []struct{ path, ctype, must string }{
		{"/", "text/html", `<script src="app.js">`},
		{"/app.js", "text/javascript", "v1/chat/completions"},
		{"/style.css", "text/css", "#statusbar"},
		{"/favicon.svg", "image/svg+xml", "<svg"},
	} {
		code, hdr, body := ts.do(t, "GET", f.path, "")
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), f.ctype) || !strings.Contains(string(body), f.must) {
			t.Errorf("%s: %d %s", f.path, code, hdr.Get("Content-Type"))
		}
		// No network fetches: nothing in the page names another origin.
		if regexp.MustCompile(`(src|href|url)\s*[=(]\s*["']?(https?:)?//`).Match(body) || strings.Contains(string(body), "fetch(\"http") {
			t.Errorf("%s refers to another origin", f.path)
		}
	}
}
