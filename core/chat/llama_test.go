package chat

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// llamaRef runs tools/jinja-ref/build/chatref: llama.cpp's own
// common_chat_templates_apply and common_chat_parse from the reference
// release's libllama-common. It skips when the binary is not built and fails
// instead when CI=true.
func llamaRef(t *testing.T, req map[string]any) (renders, parses []map[string]any) {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "tools", "jinja-ref", "build", "chatref"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		msg := "llama.cpp chat reference not built (run: bash tools/parity/setup.sh && bash tools/jinja-ref/setup.sh)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chatref: %v\n%s", err, stderr.String())
	}
	var res struct {
		Renders []map[string]any `json:"renders"`
		Parses  []map[string]any `json:"parses"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("chatref output: %v", err)
	}
	return res.Renders, res.Parses
}

// openAIRequest writes in the way a client writes a chat-completions request.
func openAIRequest(in Input) map[string]any {
	var msgs []any
	for _, m := range in.Messages {
		o := map[string]any{"role": m.Role, "content": m.Content}
		if m.Parts != nil {
			o["content"] = m.Parts
		}
		if m.ReasoningContent != "" {
			o["reasoning_content"] = m.ReasoningContent
		}
		if m.Name != "" {
			o["name"] = m.Name
		}
		if m.ToolCallID != "" {
			o["tool_call_id"] = m.ToolCallID
		}
		if len(m.ToolCalls) > 0 {
			o["tool_calls"] = m.ToolCalls
		}
		msgs = append(msgs, o)
	}
	req := map[string]any{"messages": msgs, "add_generation_prompt": in.AddGenerationPrompt}
	if len(in.Tools) > 0 {
		req["tools"] = openAITools(in.Tools)
	}
	if len(in.Kwargs) > 0 {
		req["kwargs"] = in.Kwargs
	}
	return req
}

func openAITools(tools []Tool) []any {
	var out []any
	for _, tl := range tools {
		fn := map[string]any{"name": tl.Name, "description": tl.Description}
		if len(tl.Parameters) > 0 {
			fn["parameters"] = tl.Parameters
		}
		out = append(out, map[string]any{"type": "function", "function": fn})
	}
	return out
}

// TestKimiK3LlamaRenderParity renders every conversation with k3 and with
// llama.cpp (the same path llama-server takes for a request) and requires
// identical prompts and generation prompts.
func TestKimiK3LlamaRenderParity(t *testing.T) {
	tmpl := kimiK3(t)
	convs := conversations()
	var reqs []any
	for _, c := range convs {
		reqs = append(reqs, openAIRequest(c.in))
	}
	renders, _ := llamaRef(t, map[string]any{"template": tmpl.Source(), "renders": reqs})
	if len(renders) != len(convs) {
		t.Fatalf("llama.cpp answered %d renders, sent %d", len(renders), len(convs))
	}
	agree := 0
	defer func() {
		t.Logf("%d/%d conversations agree with llama.cpp (identical text, or both refuse)", agree, len(convs))
	}()
	for i, c := range convs {
		t.Run(c.name, func(t *testing.T) {
			r := renders[i]
			c.in.Now = fixedNow
			got, err := tmpl.Render(c.in)
			if c.wantErr {
				if err == nil || r["error"] == nil {
					t.Fatalf("want both to fail: k3 err=%v, llama.cpp=%v", err, r["error"])
				}
				agree++
				return
			}
			if err != nil {
				t.Fatalf("k3: %v", err)
			}
			if r["error"] != nil {
				t.Fatalf("llama.cpp: %v", r["error"])
			}
			if diff := cmp.Diff(r["prompt"], got); diff != "" {
				t.Fatalf("prompt differs from llama.cpp (-llama +k3):\n%s", diff)
			}
			if !c.in.AddGenerationPrompt {
				agree++
				return
			}
			gen, err := tmpl.GenerationPrompt(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(r["generation_prompt"], gen); diff != "" {
				t.Fatalf("generation prompt differs from llama.cpp (-llama +k3):\n%s", diff)
			}
			agree++
		})
	}
}

// TestKimiK3LlamaParseParity parses replies with k3 and with llama.cpp's
// Kimi K3 parser. Cases llama.cpp rejects, or where k3 is deliberately more
// lenient (see llamaParseDiffers), are listed, not compared.
func TestKimiK3LlamaParseParity(t *testing.T) {
	tmpl := kimiK3(t)
	tools := []Tool{weatherTool, searchTool}
	for _, rf := range []string{"deepseek", "none"} {
		var reqs []any
		for _, c := range parseCases {
			reqs = append(reqs, map[string]any{"text": c.in, "tools": openAITools(tools),
				"kwargs": map[string]any{"thinking": c.opts.Thinking}, "reasoning_format": rf})
		}
		_, parses := llamaRef(t, map[string]any{"template": tmpl.Source(), "parses": reqs})
		if len(parses) != len(parseCases) {
			t.Fatalf("llama.cpp answered %d parses, sent %d", len(parses), len(parseCases))
		}
		kimiK3ParseParity(t, rf, tools, parses)
	}
}

func kimiK3ParseParity(t *testing.T, rf string, tools []Tool, parses []map[string]any) {
	compared := 0
	for i, c := range parseCases {
		t.Run(rf+"/"+c.name, func(t *testing.T) {
			r := parses[i]
			if why, ok := llamaParseDiffers[c.name]; ok {
				t.Logf("not compared, k3 differs on purpose: %s (llama.cpp gave %v)", why, r)
				return
			}
			if r["error"] != nil {
				t.Fatalf("llama.cpp: %v", r["error"])
			}
			got := Parse(c.in, ParseOptions{Thinking: c.opts.Thinking, Tools: tools, ReasoningNone: rf == "none"})
			want := Parsed{Reasoning: r["reasoning_content"].(string), Content: r["content"].(string)}
			for _, x := range r["tool_calls"].([]any) {
				tc := x.(map[string]any)
				want.ToolCalls = append(want.ToolCalls, ToolCall{Function: FunctionCall{
					Name: tc["name"].(string), Arguments: tc["arguments"].(string)}})
			}
			for j := range got.ToolCalls {
				got.ToolCalls[j].ID, got.ToolCalls[j].Type = "", "" // llama-server makes its own ids
			}
			if diff := cmp.Diff(want, got, cmpEmpty); diff != "" {
				t.Fatalf("k3 differs from llama.cpp (-llama +k3):\n%s", diff)
			}
			compared++
		})
	}
	t.Logf("reasoning_format %s: %d/%d replies parsed identically to llama.cpp", rf, compared, len(parseCases))
}

// llamaParseDiffers lists the parse cases where k3 departs from llama.cpp on
// purpose, and why.
var llamaParseDiffers = map[string]string{
	"generation_prompt_included": "llama.cpp puts the generation prompt in front of the reply itself; " +
		"k3 also accepts a reply that repeats it",
	"whitespace_between_sections_dropped": "llama.cpp rejects text between sections; k3 drops whitespace there",
	"no_schema_uses_type_attribute": "the tool is not declared: llama.cpp rejects the reply; " +
		"k3 returns the call, typed by the type attributes",
	"json_block_and_no_arguments": "llama.cpp's parser has no rule for json-block arguments " +
		"(the template renders them) nor for undeclared tools",
	"truncated_inside_argument": "llama.cpp rejects a final reply cut inside a call; k3 closes the call",
	"text_after_end_of_message_ignored": "<|end_of_msg|> is an end-of-generation token, so llama-server " +
		"never parses text after it; k3 ends the message there",
	"tools_opened_from_reasoning": "llama.cpp keeps a tools section opened inside unclosed reasoning " +
		"as reasoning text; k3 returns the calls",
}
