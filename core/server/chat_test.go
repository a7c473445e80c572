package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/server"
)

type chatResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role             string  `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent string  `json:"reasoning_content"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		Delta struct {
			Role             string  `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent string  `json:"reasoning_content"`
			ToolCalls        []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Timings *struct {
		PromptN    int `json:"prompt_n"`
		CacheN     int `json:"cache_n"`
		PredictedN int `json:"predicted_n"`
	} `json:"timings"`
}

// reply is a whole chat reply as the client sees it.
type reply struct {
	Reasoning, Content string
	Calls              []string // "name(arguments)"
	Finish             string
}

func wholeReply(t *testing.T, body []byte) (reply, chatResp) {
	t.Helper()
	var r chatResp
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if r.Object != "chat.completion" || len(r.Choices) != 1 || r.Choices[0].Message.Role != "assistant" || r.Usage == nil || r.Timings == nil {
		t.Fatalf("bad chat.completion: %s", body)
	}
	m := r.Choices[0].Message
	out := reply{Reasoning: m.ReasoningContent, Finish: *r.Choices[0].FinishReason}
	if m.Content != nil {
		out.Content = *m.Content
	}
	for _, c := range m.ToolCalls {
		if c.Type != "function" || c.ID == "" {
			t.Errorf("tool call without type/id: %+v", c)
		}
		out.Calls = append(out.Calls, c.Function.Name+"("+c.Function.Arguments+")")
	}
	return out, r
}

// streamReply checks a chat stream's framing and reassembles its reply.
func streamReply(t *testing.T, events []string, wantUsage bool) (reply, *chatResp) {
	t.Helper()
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end in [DONE]: %q", events)
	}
	events = events[:len(events)-1]
	var usage *chatResp
	if wantUsage {
		usage = new(chatResp)
		if err := json.Unmarshal([]byte(events[len(events)-1]), usage); err != nil || len(usage.Choices) != 0 || usage.Usage == nil {
			t.Fatalf("bad usage chunk: %s", events[len(events)-1])
		}
		events = events[:len(events)-1]
	}
	var out reply
	calls := map[int]*[2]string{}
	for i, ev := range events {
		var c chatResp
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, ev)
		}
		if c.Object != "chat.completion.chunk" || len(c.Choices) != 1 {
			t.Fatalf("event %d: bad chunk %s", i, ev)
		}
		ch := c.Choices[0]
		last := i == len(events)-1
		switch {
		case i == 0:
			if ch.Delta.Role != "assistant" {
				t.Fatalf("first chunk has no role: %s", ev)
			}
		case last:
			if ch.FinishReason == nil || c.Timings == nil {
				t.Fatalf("last chunk lacks finish_reason or timings: %s", ev)
			}
			out.Finish = *ch.FinishReason
		case ch.FinishReason != nil:
			t.Fatalf("finish_reason before the last chunk: %s", ev)
		}
		if ch.Delta.Content != nil {
			out.Content += *ch.Delta.Content
		}
		out.Reasoning += ch.Delta.ReasoningContent
		for _, tc := range ch.Delta.ToolCalls {
			if calls[tc.Index] == nil {
				calls[tc.Index] = &[2]string{}
			}
			calls[tc.Index][0] += tc.Function.Name
			calls[tc.Index][1] += tc.Function.Arguments
		}
	}
	for i := 0; i < len(calls); i++ {
		out.Calls = append(out.Calls, calls[i][0]+"("+calls[i][1]+")")
	}
	return out, usage
}

func postStream(t *testing.T, url, body string) []string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return sseEvents(t, resp.Body)
}

const weatherTools = `"tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"number"}}}}}]`

const scriptedReply = "Plan: call it.<|close|>think<|sep|><|open|>response<|sep|>Checking the weather.<|close|>response<|sep|>" +
	"<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>" +
	"<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>" +
	"<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>" +
	"<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"

// postChat posts a whole (not streamed) chat request to the server at url
// and returns its reply.
func postChat(t *testing.T, url, body string) reply {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got, _ := wholeReply(t, b)
	return got
}

func scriptedServer(t *testing.T, text string, eog bool) *httptest.Server {
	t.Helper()
	s := server.New(server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RequestLog: io.Discard},
		scriptBackend{Backend: tinyBackend(t), reply: text, eog: eog})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// TestChatParsesReply runs a fixed reply with reasoning, content and a
// tool call through both response forms.
func TestChatParsesReply(t *testing.T) {
	ts := scriptedServer(t, scriptedReply, true)
	want := reply{Reasoning: "Plan: call it.", Content: "Checking the weather.",
		Calls: []string{`get_weather({"city":"Paris","days":3})`}, Finish: "tool_calls"}
	tests := []struct {
		name, extra string
		want        reply
	}{
		{"tools", "," + weatherTools, want},
		{"stop inside the content", `,"stop":["weather"]`, reply{Reasoning: "Plan: call it.", Content: "Checking the ", Finish: "stop"}},
		{"stop across tokens in reasoning", `,"stop":"n: ca"`, reply{Reasoning: "Pla", Finish: "stop"}},
		{"max_tokens", `,"max_tokens":3`, reply{Reasoning: "Plan: call"[:0], Finish: "length"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"messages":[{"role":"user","content":"Weather in Paris?"}]` + tt.extra + `}`
			got := postChat(t, ts.URL, body)
			if tt.name == "max_tokens" {
				// Three tokens of the reasoning, whatever the tokenizer made of it.
				tt.want.Reasoning = got.Reasoning
				if !strings.HasPrefix("Plan: call it.", got.Reasoning) || got.Reasoning == "" {
					t.Errorf("reasoning %q is not a prefix of the reply", got.Reasoning)
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("whole reply (-want +got):\n%s", d)
			}
			streamed, usage := streamReply(t, postStream(t, ts.URL+"/v1/chat/completions",
				strings.TrimSuffix(body, "}")+`,"stream":true,"stream_options":{"include_usage":true}}`), true)
			if d := cmp.Diff(got, streamed); d != "" {
				t.Errorf("streamed reply differs from the whole one (-whole +streamed):\n%s", d)
			}
			if usage.Usage.TotalTokens != usage.Usage.PromptTokens+usage.Usage.CompletionTokens || usage.Usage.PromptTokens == 0 {
				t.Errorf("bad usage %+v", usage.Usage)
			}
		})
	}
}

// TestToolChoiceForced: tool_choice "required" or a named function makes
// the reply a tool call whatever the model would have written first: the
// prompt goes on with the call's opening (chat.ForcedCall) and the reply,
// parsed from there, is that call with the model's arguments.
func TestToolChoiceForced(t *testing.T) {
	var prompt string
	s := server.New(server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RequestLog: io.Discard},
		scriptBackend{Backend: tinyBackend(t), eog: true, prompt: &prompt,
			reply: `<|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>`})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	named := server.New(server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), RequestLog: io.Discard},
		scriptBackend{Backend: tinyBackend(t), eog: true, prompt: &prompt,
			reply: `search" index="1"<|sep|><|open|>argument key="query" type="string"<|sep|>go<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>`})
	tsAny := httptest.NewServer(named.Handler())
	t.Cleanup(tsAny.Close)
	twoTools := `"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}},` +
		`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	weather := reply{Calls: []string{`get_weather({"city":"Paris"})`}, Finish: "tool_calls"}
	tests := []struct {
		name, url, extra string
		want             reply
		opened           string // what the prompt ends with
	}{
		{"named", ts.URL, "," + twoTools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}}`, weather,
			`<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>`},
		{"required, one tool", ts.URL, "," + weatherTools + `,"tool_choice":"required"`, weather,
			`<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>`},
		{"required, the model names it", tsAny.URL, "," + twoTools + `,"tool_choice":"required"`,
			reply{Calls: []string{`search({"query":"go"})`}, Finish: "tool_calls"}, `<|open|>tools<|sep|><|open|>call tool="`},
		{"named, thinking off", ts.URL, "," + twoTools + `,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"chat_template_kwargs":{"enable_thinking":false}`,
			weather, `<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"messages":[{"role":"user","content":"Weather in Paris?"}]` + tt.extra + `}`
			got := postChat(t, tt.url, body)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("whole reply (-want +got):\n%s", d)
			}
			if !strings.HasSuffix(prompt, tt.opened) {
				t.Errorf("prompt ends %q, want ...%q", prompt[max(0, len(prompt)-120):], tt.opened)
			}
			streamed, _ := streamReply(t, postStream(t, tt.url+"/v1/chat/completions", strings.TrimSuffix(body, "}")+`,"stream":true}`), false)
			if d := cmp.Diff(got, streamed); d != "" {
				t.Errorf("streamed reply differs from the whole one (-whole +streamed):\n%s", d)
			}
		})
	}
	// Without a forced choice the prompt ends at the generation prompt.
	postChat(t, ts.URL, `{"messages":[{"role":"user","content":"Hi"}],`+weatherTools+`,"tool_choice":"auto"}`)
	if strings.Contains(prompt, `call tool="`) {
		t.Errorf("tool_choice auto forced a call: prompt ends %q", prompt[max(0, len(prompt)-120):])
	}
	code, _, b := (&testServer{Server: ts}).do(t, "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"tool_choice":"required"}`)
	if code != 400 || !strings.Contains(string(b), "needs tools") {
		t.Errorf("required without tools: %d %s", code, b)
	}
}

// TestToolChoiceRealModel: the random tiny model, which never writes a
// tool call of its own, replies with a call of the named tool.
func TestToolChoiceRealModel(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	body := `{"messages":[{"role":"user","content":"Weather?"}],` + weatherTools +
		`,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"max_tokens":8,"seed":1}`
	code, _, b := ts.do(t, "POST", "/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	got, _ := wholeReply(t, b)
	if len(got.Calls) != 1 || !strings.HasPrefix(got.Calls[0], "get_weather(") {
		t.Errorf("reply %+v, want one call of get_weather", got)
	}
	// "required" among several tools: the model writes the name, held to
	// the declared ones.
	two := `"tools":[{"type":"function","function":{"name":"search"}},{"type":"function","function":{"name":"get_weather"}}]`
	for seed := range 4 {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"Weather?"}],%s,"tool_choice":"required","max_tokens":40,"seed":%d,"temperature":1}`, two, seed)
		code, _, b := ts.do(t, "POST", "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("status %d: %s", code, b)
		}
		got, _ := wholeReply(t, b)
		if len(got.Calls) != 1 || !(strings.HasPrefix(got.Calls[0], "search(") || strings.HasPrefix(got.Calls[0], "get_weather(")) {
			t.Errorf("seed %d: reply %+v, want one call of search or get_weather: %s", seed, got, b)
		}
	}
}

// TestChatRealModel runs the random tiny model: shapes and invariants only.
func TestChatRealModel(t *testing.T) {
	ts := newTestServer(t, server.Options{Alias: "tiny-alias"})
	body := `{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image_url","image_url":{"url":"x"}}]}],` +
		`"max_tokens":6,"seed":3,"temperature":0.9,"top_k":20,"top_p":0.9,"min_p":0.01,"repeat_penalty":1.1,"presence_penalty":0.5,"frequency_penalty":0.5,"logit_bias":{"5":-100}}`
	code, _, b := ts.do(t, "POST", "/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	whole, r := wholeReply(t, b)
	if r.Model != "tiny-alias" || !strings.HasPrefix(r.ID, "chatcmpl-") {
		t.Errorf("model %q id %q", r.Model, r.ID)
	}
	if r.Usage.CompletionTokens < 1 || r.Usage.CompletionTokens > 6 || r.Timings.PredictedN != r.Usage.CompletionTokens {
		t.Errorf("usage %+v timings %+v", r.Usage, r.Timings)
	}
	if whole.Finish == "length" && r.Usage.CompletionTokens != 6 {
		t.Errorf("finish length after %d of 6 tokens", r.Usage.CompletionTokens)
	}
	streamed, _ := streamReply(t, postStream(t, ts.URL+"/v1/chat/completions", strings.TrimSuffix(body, "}")+`,"stream":true}`), false)
	if d := cmp.Diff(whole, streamed); d != "" {
		t.Errorf("same seed, streamed reply differs (-whole +streamed):\n%s", d)
	}
	if !strings.Contains(ts.log.String(), "prompt eval time = ") || !strings.Contains(ts.log.String(), "       eval time = ") {
		t.Errorf("no llama.cpp-style timing lines in the request log:\n%s", ts.log)
	}
}

func TestThinkingSwitch(t *testing.T) {
	ts := scriptedServer(t, "just content<|close|>response<|sep|>", true)
	code, b := 0, []byte(nil)
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"thinking":false}}`))
	if err != nil {
		t.Fatal(err)
	}
	code = resp.StatusCode
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	got, _ := wholeReply(t, b)
	if got.Content != "just content" || got.Reasoning != "" {
		t.Errorf("thinking off: got %+v, want content only", got)
	}
}

// TestChatFollowUpReusesPrefix: the next turn of a conversation starts
// with the previous turn's prompt, which the engine does not evaluate again.
func TestChatFollowUpReusesPrefix(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	turn := func(msgs []map[string]string) (reply, chatResp) {
		b, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": 6, "temperature": 0,
			"chat_template_kwargs": map[string]bool{"thinking": false}})
		code, _, body := ts.do(t, "POST", "/v1/chat/completions", string(b))
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		return wholeReply(t, body)
	}
	msgs := []map[string]string{{"role": "user", "content": "Hello there, model."}}
	first, r1 := turn(msgs)
	msgs = append(msgs, map[string]string{"role": "assistant", "content": first.Content}, map[string]string{"role": "user", "content": "Go on."})
	_, r2 := turn(msgs)
	if got, want := r2.Usage.PromptTokensDetails.CachedTokens, r1.Usage.PromptTokens; got != want {
		t.Errorf("second turn reused %d tokens, want the first turn's %d prompt tokens", got, want)
	}
	if r2.Timings.CacheN != r2.Usage.PromptTokensDetails.CachedTokens || r2.Timings.PromptN != r2.Usage.PromptTokens-r2.Timings.CacheN {
		t.Errorf("timings %+v disagree with usage %+v", r2.Timings, r2.Usage)
	}
}
