package server_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/server/local"
)

func decodeTo(t *testing.T, body []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
}

// TestProps: GET /props in llama-server's shape, with the server's request
// defaults (--temp) and the model file's name only; POST /props refused
// as llama-server refuses it without --props.
func TestProps(t *testing.T) {
	temp := 0.3
	ts := newTestServer(t, server.Options{Defaults: server.RequestDefaults{Temperature: &temp}})
	code, _, body := ts.do(t, "GET", "/props", "")
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	var p struct {
		DGS struct {
			Params map[string]any `json:"params"`
			NCtx   int            `json:"n_ctx"`
		} `json:"default_generation_settings"`
		TotalSlots   int             `json:"total_slots"`
		ModelPath    string          `json:"model_path"`
		ChatTemplate string          `json:"chat_template"`
		BuildInfo    string          `json:"build_info"`
		Modalities   map[string]bool `json:"modalities"`
	}
	decodeTo(t, body, &p)
	if p.TotalSlots != 1 || p.ModelPath != "tiny.gguf" || p.DGS.NCtx != 2048 || p.ChatTemplate == "" || p.BuildInfo == "" || p.Modalities["vision"] {
		t.Errorf("props: %s", body)
	}
	if got := p.DGS.Params["temperature"]; got != 0.3 {
		t.Errorf("temperature = %v, want the server default 0.3", got)
	}
	code, _, body = ts.do(t, "POST", "/props", "{}")
	if code != 501 || decodeErr(t, body).Error.Type != "not_supported_error" {
		t.Errorf("POST /props: %d %s", code, body)
	}
}

// TestSlots: one idle slot in llama-server's shape.
func TestSlots(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	code, _, body := ts.do(t, "GET", "/slots", "")
	var slots []map[string]any
	decodeTo(t, body, &slots)
	if code != 200 || len(slots) != 1 || slots[0]["id"] != 0.0 || slots[0]["is_processing"] != false || slots[0]["n_ctx"] != 2048.0 {
		t.Errorf("%d %s", code, body)
	}
}

// TestNoSlots: --no-slots answers llama-server's 501.
func TestNoSlots(t *testing.T) {
	ts := newTestServer(t, server.Options{NoSlots: true})
	code, _, body := ts.do(t, "GET", "/slots", "")
	if code != 501 || !strings.Contains(decodeErr(t, body).Error.Message, "slots endpoint") {
		t.Errorf("%d %s", code, body)
	}
}

// TestModelByID: client.models.retrieve(id) works for the served id and
// gets OpenAI's 404 for another.
func TestModelByID(t *testing.T) {
	ts := newTestServer(t, server.Options{Alias: "kimi"})
	code, _, body := ts.do(t, "GET", "/v1/models/kimi", "")
	var m struct{ ID, Object string }
	decodeTo(t, body, &m)
	if code != 200 || m.ID != "kimi" || m.Object != "model" {
		t.Errorf("%d %s", code, body)
	}
	code, _, body = ts.do(t, "GET", "/v1/models/gpt-4o", "")
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	decodeTo(t, body, &e)
	if code != 404 || e.Error.Code != "model_not_found" || !strings.Contains(e.Error.Message, "gpt-4o") {
		t.Errorf("%d %s", code, body)
	}
}

// TestModelAliasesAndTags: --alias a,b,c and --tags as llama-server's
// test_server_model_aliases_and_tags: every alias and tag listed, the id
// the first alias in sorted order, each alias found by /v1/models/{id}.
func TestModelAliasesAndTags(t *testing.T) {
	var p config.Profile
	p.Server.Alias, p.Server.Tags = "tinyllama-2, fim,code,fim", []string{"chat", "fim", "small"}
	ts := newTestServer(t, server.OptionsFromConfig(p))
	code, _, body := ts.do(t, "GET", "/v1/models", "")
	var list struct {
		Data []struct {
			ID            string
			Aliases, Tags []string
		}
	}
	decodeTo(t, body, &list)
	if code != 200 || len(list.Data) != 1 {
		t.Fatalf("%d %s", code, body)
	}
	m := list.Data[0]
	if m.ID != "code" || !slices.Equal(m.Aliases, []string{"code", "fim", "tinyllama-2"}) || !slices.Equal(m.Tags, []string{"chat", "fim", "small"}) {
		t.Errorf("%s", body)
	}
	if code, _, body = ts.do(t, "GET", "/v1/models/tinyllama-2", ""); code != 200 || !strings.Contains(string(body), `"id":"code"`) {
		t.Errorf("%d %s", code, body)
	}
}

type nativeOut struct {
	Content         string         `json:"content"`
	Tokens          []int32        `json:"tokens"`
	Stop            bool           `json:"stop"`
	TokensPredicted int            `json:"tokens_predicted"`
	TokensEvaluated int            `json:"tokens_evaluated"`
	StopType        string         `json:"stop_type"`
	Prompt          string         `json:"prompt"`
	Settings        map[string]any `json:"generation_settings"`
	Timings         map[string]any `json:"timings"`
}

// TestNativeCompletion: /completion with a string, token ids and a mix,
// return_tokens, the limit reported as stop_type "limit", and its errors.
func TestNativeCompletion(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	code, _, body := ts.do(t, "POST", "/completion", `{"prompt":"Hello","n_predict":3,"return_tokens":true,"seed":1,"cache_prompt":true}`)
	var r nativeOut
	decodeTo(t, body, &r)
	if code != 200 || !r.Stop || r.TokensPredicted != 3 || len(r.Tokens) != 3 || r.StopType != "limit" || r.Timings == nil || r.Settings["n_predict"] != 3.0 || !strings.Contains(r.Prompt, "Hello") {
		t.Fatalf("%d %s", code, body)
	}
	hello := r.TokensEvaluated
	// The same prompt as ids, then mixed: ids followed by text.
	code, _, body = ts.do(t, "POST", "/tokenize", `{"content":"Hello","add_special":true}`)
	var tk struct{ Tokens []int32 }
	decodeTo(t, body, &tk)
	ids, _ := json.Marshal(tk.Tokens)
	code, _, body = ts.do(t, "POST", "/completion", `{"prompt":`+string(ids)+`,"n_predict":1}`)
	decodeTo(t, body, &r)
	if code != 200 || r.TokensEvaluated != hello {
		t.Errorf("token prompt: %d %s (want %d evaluated)", code, body, hello)
	}
	mixed := strings.TrimSuffix(string(ids), "]") + `," world"]`
	code, _, body = ts.do(t, "POST", "/completion", `{"prompt":`+mixed+`,"n_predict":1}`)
	decodeTo(t, body, &r)
	if code != 200 || r.TokensEvaluated <= hello || len(r.Tokens) != 0 {
		t.Errorf("mixed prompt: %d %s", code, body)
	}
	for _, c := range []struct {
		body string
		code int
	}{
		{`{"prompt":["a","b"]}`, 400},
		{`{"n_predict":2}`, 400},
		{`{"prompt":"x","n_probs":2,"post_sampling_probs":true}`, 501},
		{`{"prompt":[1,{}]}`, 400},
	} {
		if code, _, body := ts.do(t, "POST", "/completion", c.body); code != c.code {
			t.Errorf("%s: %d %s, want %d", c.body, code, body, c.code)
		}
	}
}

// TestNativeCompletionStream: partial chunks with stop false, then the
// final result with stop true and timings; no [DONE] (llama-server's
// native stream has none).
func TestNativeCompletionStream(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	req, _ := http.NewRequest("POST", ts.URL+"/completion", strings.NewReader(`{"prompt":"Hi","n_predict":4,"stream":true,"return_tokens":true,"seed":3}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := sseEvents(t, resp.Body)
	n := 0
	for i, ev := range events {
		var r nativeOut
		decodeTo(t, []byte(ev), &r)
		last := i == len(events)-1
		if !last {
			n += len(r.Tokens)
		}
		if r.Stop != last || (!last && len(r.Tokens) > 1) || (last && (r.Timings == nil || r.TokensPredicted != 4)) {
			t.Errorf("event %d: %s", i, ev)
		}
	}
	if n != 4 || len(events) < 5 {
		t.Errorf("want the 4 tokens in partial chunks and a final one, got %q", events)
	}
}

// TestRequestDefaults: the server's --seed, --temp and -n apply to
// requests that set none, and a request's own values win.
func TestRequestDefaults(t *testing.T) {
	temp, seed := 1.5, int64(11)
	ts := newTestServer(t, server.Options{Defaults: server.RequestDefaults{Temperature: &temp, Seed: &seed, NPredict: 2}})
	var a, b nativeOut
	_, _, body := ts.do(t, "POST", "/completion", `{"prompt":"Once","return_tokens":true}`)
	decodeTo(t, body, &a)
	_, _, body = ts.do(t, "POST", "/completion", `{"prompt":"Once","return_tokens":true}`)
	decodeTo(t, body, &b)
	if a.TokensPredicted != 2 || a.Settings["seed"] != 11.0 || a.Settings["temperature"] != 1.5 {
		t.Fatalf("defaults not applied: %+v", a)
	}
	if a.Content != b.Content || len(a.Tokens) != 2 || a.Tokens[0] != b.Tokens[0] || a.Tokens[1] != b.Tokens[1] {
		t.Errorf("same default seed, different tokens: %v %v", a.Tokens, b.Tokens)
	}
	_, _, body = ts.do(t, "POST", "/completion", `{"prompt":"Once","n_predict":3,"seed":4,"temperature":0}`)
	decodeTo(t, body, &a)
	if a.TokensPredicted != 3 || a.Settings["seed"] != 4.0 || a.Settings["temperature"] != 0.0 {
		t.Errorf("request values lost: %+v", a.Settings)
	}
}

// fimBackend gives the tiny model fill-in-the-middle tokens.
type fimBackend struct{ *local.Backend }

func (fimBackend) FIMTokens() server.FIM {
	return server.FIM{Pre: 10, Suf: 11, Mid: 12, Rep: 13, Sep: 14}
}

// TestInfill: a model without FIM tokens gets llama-server's 501; one with
// them evaluates [repository context] [BOS] pre prefix suf suffix mid
// (TestInfillPrompt checks the order).
func TestInfill(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	code, _, body := ts.do(t, "POST", "/infill", `{"input_prefix":"def f(","input_suffix":"):"}`)
	if code != 501 || !strings.Contains(decodeErr(t, body).Error.Message, "Infill is not supported by this model: prefix token is missing.") {
		t.Errorf("%d %s", code, body)
	}
	be := tinyBackend(t)
	// A batch of 512 in a context of 2048 leaves room for all the
	// repository context (llama-server takes n_ctx - n_batch - 2*n_predict).
	s := server.New(server.Options{RequestLog: &syncWriter{}, Batch: 512}, fimBackend{be})
	ts.Server.Config.Handler = s.Handler()
	repo := 0 // [REP]myproject\n ... [SEP]filename\n, there with FIM_REP and FIM_SEP
	for _, s := range []string{"myproject\n", "filename\n"} {
		tk, _ := be.Tokenize(s, false, false)
		repo += 1 + len(tk)
	}
	code, _, body = ts.do(t, "POST", "/infill", `{"input_prefix":"def f(","input_suffix":"):","n_predict":1}`)
	var r nativeOut
	decodeTo(t, body, &r)
	pre, _ := be.Tokenize("def f(", false, false)
	suf, _ := be.Tokenize("):", false, false)
	bos, _ := be.Tokenize("", true, false)
	if want := len(bos) + 3 + len(pre) + len(suf) + repo; code != 200 || r.TokensEvaluated != want {
		t.Errorf("%d %s, want %d tokens evaluated", code, body, want)
	}
	if code, _, body := ts.do(t, "POST", "/infill", `{"n_predict":1}`); code != 400 {
		t.Errorf("no input: %d %s", code, body)
	}
	// Repository context: [REP]myproject\n [SEP]a.py\n text [SEP]filename\n before it.
	code, _, body = ts.do(t, "POST", "/infill", `{"input_prefix":"def f(","input_suffix":"):","n_predict":1,"input_extra":[{"filename":"a.py","text":"x = 1"}]}`)
	decodeTo(t, body, &r)
	extra := 1 // [SEP]a.py\n x = 1
	for _, s := range []string{"a.py\n", "x = 1"} {
		tk, _ := be.Tokenize(s, false, false)
		extra += len(tk)
	}
	if want := len(bos) + 3 + len(pre) + len(suf) + repo + extra; code != 200 || r.TokensEvaluated != want {
		t.Errorf("with input_extra: %d %s, want %d tokens evaluated", code, body, want)
	}
	for _, bad := range []string{`{"input_prefix":"a","input_extra":{"text":"x"}}`, `{"input_prefix":"a","input_extra":[{"filename":"a.py"}]}`,
		`{"input_prefix":"a","input_extra":[{"text":"x","filename":3}]}`} {
		if code, _, body := ts.do(t, "POST", "/infill", bad); code != 400 || !strings.Contains(string(body), "must") {
			t.Errorf("%s: %d %s", bad, code, body)
		}
	}
}

// TestApplyTemplate: the chat template's prompt, nothing generated.
func TestApplyTemplate(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	code, _, body := ts.do(t, "POST", "/apply-template", `{"messages":[{"role":"user","content":"hello there"}]}`)
	var r struct{ Prompt string }
	decodeTo(t, body, &r)
	if code != 200 || !strings.Contains(r.Prompt, "hello there") {
		t.Errorf("%d %s", code, body)
	}
}

// TestChatTurnRules: llama-server's 400s for how a conversation may end.
func TestChatTurnRules(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	u := `{"role":"user","content":"hi"}`
	a := `{"role":"assistant","content":"yo"}`
	for _, c := range []struct {
		name, body, msg string
		code            int
	}{
		{"two assistants at the end", `{"messages":[` + u + `,` + a + `,` + a + `]}`, "Cannot have 2 or more assistant messages at the end of the list.", 400},
		{"continue and generation prompt", `{"messages":[` + u + `,` + a + `],"continue_final_message":true}`, "Cannot set both add_generation_prompt and continue_final_message to true.", 400},
		{"continue a user message", `{"messages":[` + u + `],"continue_final_message":true,"add_generation_prompt":false}`, "continue_final_message needs", 400},
		{"continue a tool call", `{"messages":[` + u + `,{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}],"continue_final_message":true,"add_generation_prompt":false}`, "Cannot continue an assistant message that contains tool calls.", 400},
		{"unknown role", `{"messages":[{"role":"wizard","content":"x"}]}`, "unknown role", 400},
		{"messages not an array", `{"messages":{"role":"user"}}`, "messages", 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := ts.do(t, "POST", "/v1/chat/completions", c.body)
			if code != c.code || !strings.Contains(decodeErr(t, body).Error.Message, c.msg) {
				t.Errorf("%d %s", code, body)
			}
		})
	}
}

// TestContinueFinalMessage: a conversation that ends with an assistant
// message continues it (llama-server's default prefill, or asked with
// continue_final_message): the prompt ends inside the message, and the
// reply holds only what the model wrote after it. --no-prefill-assistant
// renders that message as finished and opens a new one.
func TestContinueFinalMessage(t *testing.T) {
	u := `{"role":"user","content":"Write a haiku."}`
	a := `{"role":"assistant","content":"Autumn moon rises"}`
	prompt := func(ts *testServer, body string) string {
		t.Helper()
		code, _, b := ts.do(t, "POST", "/apply-template", body)
		var r struct{ Prompt string }
		decodeTo(t, b, &r)
		if code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		return r.Prompt
	}
	ts := newTestServer(t, server.Options{})
	open := "<|open|>response<|sep|>Autumn moon rises"
	for _, body := range []string{
		`{"messages":[` + u + `,` + a + `]}`,
		`{"messages":[` + u + `,` + a + `],"continue_final_message":true,"add_generation_prompt":false}`,
		`{"messages":[` + u + `,` + a + `],"continue_final_message":"content","add_generation_prompt":false}`,
	} {
		if p := prompt(ts, body); !strings.HasSuffix(p, open) {
			t.Errorf("%s: prompt ends %q, want the message left open", body, p[max(0, len(p)-80):])
		}
	}
	reasoning := `{"role":"assistant","reasoning_content":"Five syllables"}`
	if p := prompt(ts, `{"messages":[`+u+`,`+reasoning+`]}`); !strings.HasSuffix(p, "<|open|>think<|sep|>Five syllables") {
		t.Errorf("reasoning continuation ends %q", p[max(0, len(p)-80):])
	}

	code, _, body := ts.do(t, "POST", "/v1/chat/completions", `{"messages":[`+u+`,`+a+`],"max_tokens":4,"temperature":0}`)
	var r struct {
		Choices []struct{ Message struct{ Content string } }
		Usage   struct {
			PromptTokens int `json:"prompt_tokens"`
		}
	}
	decodeTo(t, body, &r)
	if code != 200 || strings.Contains(r.Choices[0].Message.Content, "Autumn moon rises") {
		t.Errorf("continued chat: %d %s", code, body)
	}

	off := newTestServer(t, server.Options{NoPrefillAssistant: true})
	if p := prompt(off, `{"messages":[`+u+`,`+a+`]}`); strings.HasSuffix(p, open) || !strings.Contains(p, "Autumn moon rises<|close|>response<|sep|>") {
		t.Errorf("without prefill the message is closed and a new one opened: %q", p[max(0, len(p)-120):])
	}
}

// TestNativeSettingsEcho: generation_settings carries the request's stop
// strings, ignore_eos and logit_bias (banned tokens as null), as
// llama-server's test_ignore_eos reads them.
func TestNativeSettingsEcho(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	code, _, body := ts.do(t, "POST", "/completion", `{"prompt":"Once","n_predict":1,"ignore_eos":true,"stop":["\n\n"],"logit_bias":[[5,1.5]]}`)
	var r struct {
		Settings struct {
			Stop      []string `json:"stop"`
			IgnoreEOS bool     `json:"ignore_eos"`
			LogitBias []struct {
				Bias  *float64 `json:"bias"`
				Token int32    `json:"token"`
			} `json:"logit_bias"`
		} `json:"generation_settings"`
	}
	decodeTo(t, body, &r)
	st := r.Settings
	banned, five := 0, false
	for _, lb := range st.LogitBias {
		if lb.Bias == nil {
			banned++
		}
		five = five || (lb.Token == 5 && lb.Bias != nil && *lb.Bias == 1.5)
	}
	if code != 200 || !st.IgnoreEOS || len(st.Stop) != 1 || st.Stop[0] != "\n\n" || banned == 0 || !five {
		t.Errorf("%d %s", code, body)
	}
	_, _, body = ts.do(t, "POST", "/completion", `{"prompt":"Once","n_predict":1}`)
	decodeTo(t, body, &r)
	if len(r.Settings.LogitBias) != 0 || r.Settings.IgnoreEOS {
		t.Errorf("without ignore_eos: %s", body)
	}
}

// TestMetricsStartTime: /metrics carries llama-server's
// Process-Start-Time-Unix header.
func TestMetricsStartTime(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	code, hdr, _ := ts.do(t, "GET", "/metrics", "")
	if code != 200 || len(hdr.Get("Process-Start-Time-Unix")) < 10 {
		t.Errorf("%d %v", code, hdr)
	}
}

type probEntry struct {
	ID          int32       `json:"id"`
	Token       string      `json:"token"`
	Bytes       []int       `json:"bytes"`
	Logprob     float64     `json:"logprob"`
	TopLogprobs []probEntry `json:"top_logprobs"`
}

// TestNativeProbs: n_probs gives each generated token its log-probability
// and the n most likely tokens (descending; with greedy sampling the
// chosen one is the first), whole and per stream chunk, and watching the
// logits changes nothing that is sampled.
func TestNativeProbs(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	const req = `{"prompt":"Once upon","n_predict":3,"temperature":0,"ignore_eos":true,"return_tokens":true`
	code, _, body := ts.do(t, "POST", "/completion", req+`,"n_probs":4}`)
	var r struct {
		Tokens   []int32     `json:"tokens"`
		Probs    []probEntry `json:"completion_probabilities"`
		Settings struct {
			NProbs int `json:"n_probs"`
		} `json:"generation_settings"`
	}
	decodeTo(t, body, &r)
	if code != 200 || len(r.Probs) != 3 || len(r.Tokens) != 3 || r.Settings.NProbs != 4 {
		t.Fatalf("%d %s", code, body)
	}
	for i, p := range r.Probs {
		if p.ID != r.Tokens[i] || len(p.TopLogprobs) != 4 || p.TopLogprobs[0].ID != p.ID || p.Logprob > 0 || p.Logprob != p.TopLogprobs[0].Logprob {
			t.Errorf("entry %d: %+v", i, p)
		}
		for k := 1; k < len(p.TopLogprobs); k++ {
			if p.TopLogprobs[k].Logprob > p.TopLogprobs[k-1].Logprob {
				t.Errorf("entry %d: top_logprobs not descending: %+v", i, p.TopLogprobs)
			}
		}
		if len(p.Bytes) == 0 && p.Token != "" {
			t.Errorf("entry %d: no bytes", i)
		}
	}
	var plain struct{ Tokens []int32 }
	_, _, body = ts.do(t, "POST", "/completion", req+`}`)
	decodeTo(t, body, &plain)
	if len(plain.Tokens) != 3 || plain.Tokens[0] != r.Tokens[0] || plain.Tokens[1] != r.Tokens[1] || plain.Tokens[2] != r.Tokens[2] {
		t.Errorf("n_probs changed what was sampled: %v vs %v", plain.Tokens, r.Tokens)
	}
	hreq, _ := http.NewRequest("POST", ts.URL+"/completion", strings.NewReader(req+`,"n_probs":2,"stream":true}`))
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n := 0
	for _, ev := range sseEvents(t, resp.Body) {
		var c struct {
			Tokens []int32     `json:"tokens"`
			Probs  []probEntry `json:"completion_probabilities"`
		}
		decodeTo(t, []byte(ev), &c)
		if len(c.Tokens) == 1 {
			n++
			if len(c.Probs) != 1 || c.Probs[0].ID != c.Tokens[0] || len(c.Probs[0].TopLogprobs) != 2 {
				t.Errorf("chunk: %s", ev)
			}
		}
	}
	if n != 3 {
		t.Errorf("%d token chunks, want 3", n)
	}
}
