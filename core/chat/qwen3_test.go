package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/synth"
)

// TestQwen3LlamaRenderParity renders every conversation with Qwen3's chat
// template (the one k3 synth writes into qwen3moe files) with k3 and with
// llama.cpp, with and without enable_thinking, and requires identical
// prompts and generation prompts.
func TestQwen3LlamaRenderParity(t *testing.T) {
	llamaRenderParity(t, synth.Qwen3ChatTemplate, conversations(), nil)
}

// llamaRenderParity renders each conversation with the template src with
// k3 and with llama.cpp, with and without enable_thinking, and requires
// identical prompts and generation prompts, or both failing. The
// conversations named in differs are listed with why, not compared.
func llamaRenderParity(t *testing.T, src string, base []conversation, differs map[string]string) {
	tmpl, err := New(src)
	if err != nil {
		t.Fatal(err)
	}
	var convs []conversation
	for _, c := range base {
		convs = append(convs, c)
		off := c
		off.name += "/enable_thinking=false"
		no := false
		off.in.Kwargs = map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}
		off.in.EnableThinking = &no
		convs = append(convs, off)
	}
	var reqs []any
	for _, c := range convs {
		req := openAIRequest(c.in)
		if c.in.EnableThinking != nil {
			// llama-server takes the switch from chat_template_kwargs
			kw := map[string]any{}
			for k, v := range c.in.Kwargs {
				kw[k] = v
			}
			kw["enable_thinking"] = *c.in.EnableThinking
			req["kwargs"] = kw
		}
		reqs = append(reqs, req)
	}
	renders, _ := llamaRef(t, map[string]any{"template": tmpl.Source(), "renders": reqs})
	if len(renders) != len(convs) {
		t.Fatalf("llama.cpp answered %d renders, sent %d", len(renders), len(convs))
	}
	agree := 0
	defer func() { t.Logf("%d/%d conversations agree with llama.cpp", agree, len(convs)) }()
	for i, c := range convs {
		t.Run(c.name, func(t *testing.T) {
			r := renders[i]
			if why, ok := differs[strings.SplitN(c.name, "/", 2)[0]]; ok {
				t.Logf("not compared, k3 differs: %s", why)
				return
			}
			c.in.Now = fixedNow
			got, err := tmpl.Render(c.in)
			if err != nil || r["error"] != nil {
				if err == nil || r["error"] == nil {
					t.Fatalf("one side failed: k3 err=%v, llama.cpp=%v", err, r["error"])
				}
				agree++
				return
			}
			if diff := cmp.Diff(r["prompt"], got); diff != "" {
				t.Fatalf("prompt differs from llama.cpp (-llama +k3):\n%s", diff)
			}
			if c.in.AddGenerationPrompt {
				gen, err := tmpl.GenerationPrompt(c.in)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(r["generation_prompt"], gen); diff != "" {
					t.Fatalf("generation prompt differs from llama.cpp (-llama +k3):\n%s", diff)
				}
			}
			agree++
		})
	}
}
