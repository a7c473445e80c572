package chat

import (
	"strings"
	"testing"
)

// TestContinuation: a final assistant message is left open as llama.cpp's
// common_chat_params_init_kimi_k3 leaves it: the turns before it as
// rendered without a generation prompt, the assistant opener, the think
// section with the reasoning and, for content, the response section with
// the content; the parse starts in the resumed section.
func TestContinuation(t *testing.T) {
	tmpl := kimiK3(t)
	user := Message{Role: "user", Content: "Write a haiku."}
	base := Input{Messages: []Message{user}, Now: fixedNow}
	before, err := tmpl.Render(base)
	if err != nil {
		t.Fatal(err)
	}
	const (
		opener = `<|open|>message role="assistant"<|sep|>`
		think  = "<|open|>think<|sep|>"
	)
	for _, c := range []struct {
		name     string
		mode     Continue
		msg      Message
		want     string
		thinking bool
	}{
		{"auto content", ContinueAuto, Message{Role: "assistant", Content: "Autumn moon"},
			opener + think + "<|close|>think<|sep|><|open|>response<|sep|>Autumn moon", false},
		{"auto reasoning", ContinueAuto, Message{Role: "assistant", ReasoningContent: "Five, seven"},
			opener + think + "Five, seven", true},
		{"content after reasoning", ContinueContent, Message{Role: "assistant", ReasoningContent: "Five", Content: "Moon"},
			opener + think + "Five<|close|>think<|sep|><|open|>response<|sep|>Moon", false},
		{"reasoning of a message with content", ContinueReasoning, Message{Role: "assistant", ReasoningContent: "Five", Content: "Moon"},
			opener + think + "Five", true},
		{"content from parts", ContinueAuto, Message{Role: "assistant", Parts: []ContentPart{{Type: "text", Text: "a"}, {Type: "image_url"}, {Type: "text", Text: "b"}}},
			opener + think + "<|close|>think<|sep|><|open|>response<|sep|>a\n\nb", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := base
			in.Messages = []Message{user, c.msg}
			in.Continue = c.mode
			in.AddGenerationPrompt = true // ignored: a continuation adds none
			got, err := tmpl.Render(in)
			if err != nil {
				t.Fatal(err)
			}
			if got != before+c.want {
				t.Errorf("prompt ends %q, want %q", strings.TrimPrefix(got, before), c.want)
			}
			o, err := tmpl.ParseOptions(in)
			if err != nil || o.Thinking != c.thinking {
				t.Errorf("parse options %+v %v, want thinking %v", o, err, c.thinking)
			}
		})
	}
	// What the model writes next parses from the resumed section.
	in := base
	in.Messages = []Message{user, {Role: "assistant", ReasoningContent: "Five"}}
	in.Continue = ContinueAuto
	o, _ := tmpl.ParseOptions(in)
	p := Parse(", seven, five.<|close|>think<|sep|><|open|>response<|sep|>Moon<|close|>response<|sep|>", o)
	if p.Reasoning != ", seven, five." || p.Content != "Moon" {
		t.Errorf("parsed %+v", p)
	}

	for _, bad := range []struct {
		name string
		msgs []Message
	}{
		{"last is the user's", []Message{user}},
		{"tool calls", []Message{user, {Role: "assistant", ToolCalls: []ToolCall{{ID: "1", Type: "function", Function: FunctionCall{Name: "f", Arguments: "{}"}}}}}},
	} {
		in := base
		in.Messages, in.Continue = bad.msgs, ContinueAuto
		if got, err := tmpl.Render(in); err == nil {
			t.Errorf("%s: rendered %q, want an error", bad.name, got)
		}
	}
}

func TestParseContinue(t *testing.T) {
	for v, want := range map[any]Continue{true: ContinueAuto, false: ContinueNone, "content": ContinueContent,
		"reasoning_content": ContinueReasoning, "other": ContinueNone, nil: ContinueNone, 1.0: ContinueNone} {
		if got := ParseContinue(v); got != want {
			t.Errorf("ParseContinue(%v) = %d, want %d", v, got, want)
		}
	}
}
