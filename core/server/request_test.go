package server

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/k3-inference/k3/core/chat"
)

func TestDecodeFlexibleFields(t *testing.T) {
	tests := []struct {
		name, body string
		want       chatRequest
	}{
		{"string content and stop", `{"messages":[{"role":"user","content":"hi"}],"stop":"x"}`,
			chatRequest{Messages: []chatMessage{{Role: "user", Content: content{Text: "hi", isSet: true}}}, samplingFields: samplingFields{Stop: stopList{"x"}}}},
		{"parts, null content, stop array", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]},{"role":"assistant","content":null}],"stop":["x","y"]}`,
			chatRequest{Messages: []chatMessage{{Role: "user", Content: content{Parts: []chat.ContentPart{{Type: "text", Text: "a"}}, isSet: true}}, {Role: "assistant"}},
				samplingFields: samplingFields{Stop: stopList{"x", "y"}}}},
		{"logit_bias object", `{"logit_bias":{"3":-1.5,"4":false}}`,
			chatRequest{samplingFields: samplingFields{LogitBias: logitBias{3: -1.5, 4: float32(math.Inf(-1))}}}},
		{"logit_bias pairs", `{"logit_bias":[[7,2],[8,false]]}`,
			chatRequest{samplingFields: samplingFields{LogitBias: logitBias{7: 2, 8: float32(math.Inf(-1))}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got chatRequest
			if err := decodeJSON([]byte(tt.body), &got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got, cmp.AllowUnexported(chatRequest{}, content{}), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestDecodePrompt(t *testing.T) {
	tests := []struct {
		body string
		want prompt
		err  bool
	}{
		{`{"prompt":"abc"}`, prompt{Text: "abc", isSet: true}, false},
		{`{"prompt":[1,2,3]}`, prompt{Tokens: []int32{1, 2, 3}, isSet: true}, false},
		{`{"prompt":["abc"]}`, prompt{Text: "abc", isSet: true}, false},
		{`{"prompt":[[4,5]]}`, prompt{Tokens: []int32{4, 5}, isSet: true}, false},
		{`{"prompt":[1,"a"]}`, prompt{}, true},
		{`{"prompt":[3000000000]}`, prompt{}, true},
		{`{"prompt":true}`, prompt{}, true},
	}
	for _, tt := range tests {
		var got completionRequest
		err := decodeJSON([]byte(tt.body), &got)
		if (err != nil) != tt.err {
			t.Errorf("%s: error %v, want error %v", tt.body, err, tt.err)
			continue
		}
		if !tt.err && !cmp.Equal(tt.want, got.Prompt, cmp.AllowUnexported(prompt{})) {
			t.Errorf("%s: got %+v", tt.body, got.Prompt)
		}
	}
}

func TestMaxTokens(t *testing.T) {
	p := func(v int) *int { return &v }
	tests := []struct {
		name      string
		f         samplingFields
		prompt    int
		want      int
		errStatus int
	}{
		{"default fills the context", samplingFields{}, 10, 90, 0},
		{"within room", samplingFields{MaxTokens: p(5)}, 10, 5, 0},
		{"clamped to room", samplingFields{MaxTokens: p(95)}, 10, 90, 0},
		{"max_completion_tokens wins", samplingFields{MaxCompletionTokens: p(3), MaxTokens: p(50)}, 10, 3, 0},
		{"minus one is no limit", samplingFields{NPredict: p(-1)}, 10, 90, 0},
		{"zero", samplingFields{MaxTokens: p(0)}, 10, 0, 400},
		{"more than the context", samplingFields{MaxTokens: p(101)}, 10, 0, 400},
		{"prompt fills the context", samplingFields{}, 100, 0, 400},
	}
	for _, tt := range tests {
		got, err := maxTokens(&tt.f, tt.prompt, 100)
		switch {
		case tt.errStatus != 0 && (err == nil || err.Status != tt.errStatus):
			t.Errorf("%s: error %v, want status %d", tt.name, err, tt.errStatus)
		case tt.errStatus == 0 && (err != nil || got != tt.want):
			t.Errorf("%s: %d %v, want %d", tt.name, got, err, tt.want)
		}
	}
}

// FuzzDecodeRequest feeds arbitrary bodies through decoding and validation
// of both completion routes: they may be rejected, never panic.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stop":["a"],"logit_bias":{"1":2}}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":{"function":{"name":"f"}}}`,
		`{"prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true},"logit_bias":[[1,false]]}`,
		`{"prompt":["a"],"temperature":-1,"top_p":2,"n":3,"seed":-1}`,
		`{"prompt":"a","n":1,"n_cmpl":3}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}],"chat_template_kwargs":{"enable_thinking":1}}`,
		`[`, `null`, `{"messages":null}`, `{"prompt":[[[1]]]}`,
	} {
		f.Add([]byte(s))
	}
	info := ModelInfo{ID: "m", ContextLength: 64, Vocab: 100, EOG: []int32{99}}
	f.Fuzz(func(t *testing.T, body []byte) {
		var cr chatRequest
		if err := decodeJSON(body, &cr); err == nil {
			if _, _, aerr := chatInput(&cr, info, &Options{}); aerr != nil && aerr.Status == 0 {
				t.Fatal("error without status")
			}
			if n, aerr := maxTokens(&cr.samplingFields, 10, info.ContextLength); aerr == nil && (n < 1 || n > 54) {
				t.Fatalf("max tokens %d outside 1..54", n)
			}
			if n, aerr := (&Server{opts: Options{Parallel: 4}}).choiceCount(&cr.samplingFields, true); aerr == nil && (n < 1 || n > 4) {
				t.Fatalf("%d choices accepted on 4 slots", n)
			}
			if cfg, aerr := samplingConfig(&cr.samplingFields, info); aerr == nil {
				for id := range cfg.LogitBias {
					if id < 0 || int(id) >= info.Vocab {
						t.Fatalf("logit bias for token %d accepted", id)
					}
				}
			}
		} else if err.Status != 400 {
			t.Fatalf("decode error with status %d", err.Status)
		}
		var pr completionRequest
		if err := decodeJSON(body, &pr); err == nil && pr.Prompt.Text != "" && pr.Prompt.Tokens != nil {
			t.Fatal("prompt is both text and tokens")
		}
	})
}

// TestDecodeErrorNamesJSONPath: a value of the wrong type is named by its
// JSON path, never by the Go struct that holds it.
func TestDecodeErrorNamesJSONPath(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"max_tokens":"5"}`, `max_tokens: expected an integer, got a string`},
		{`{ "max_tokens" : "5" , "n": 1}`, `max_tokens: expected an integer, got a string`},
		{`{"max_tokens":1.5}`, `max_tokens: expected an integer, got the number 1.5`},
		{`{"temperature":"hot"}`, `temperature: expected a number, got a string`},
		{`{"messages":[{"role":"user","content":"a"},{"role":5}]}`, `messages[1].role: expected a string, got a number`},
		{`{"messages":[{"role":["a"]}]}`, `messages[0].role: expected a string, got an array`},
		{`{"messages":{"a":1}}`, `messages: expected an array, got an object`},
		{`{"stream_options":{"include_usage":"yes"}}`, `stream_options.include_usage: expected a boolean, got a string`},
		{`{"chat_template_kwargs":{"x":1},"tools":[{"type":"function","function":{"name":7}}]}`, `tools[0].function.name: expected a string, got a number`},
		{`[1]`, `request body must be a JSON object, not an array`},
	}
	for _, tt := range tests {
		var req chatRequest
		err := decodeJSON([]byte(tt.body), &req)
		if err == nil || err.Message != tt.want {
			t.Errorf("%s: %v, want %q", tt.body, err, tt.want)
		}
	}
}
