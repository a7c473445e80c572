package chat

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDeepSeek2TemplatesLlamaRenderParity renders every conversation with
// the chat templates k3 synth writes into deepseek2 files (Kimi K2's and
// DeepSeek V3's, copied from the reference's models/templates) with k3 and
// with llama.cpp, and requires identical prompts and generation prompts,
// or both refusing.
func TestDeepSeek2TemplatesLlamaRenderParity(t *testing.T) {
	for _, name := range []string{"kimi-k2", "deepseek-v3"} {
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile("../synth/" + name + ".jinja")
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := New(string(src))
			if err != nil {
				t.Fatalf("New(%s): %v", name, err)
			}
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
			for i, c := range convs {
				r := renders[i]
				c.in.Now = fixedNow
				got, err := tmpl.Render(c.in)
				switch {
				case err != nil || r["error"] != nil:
					if err == nil || r["error"] == nil {
						t.Errorf("%s: only one side fails: k3 err=%v, llama.cpp=%v", c.name, err, r["error"])
						continue
					}
				case !cmp.Equal(r["prompt"], got):
					t.Errorf("%s: prompt differs from llama.cpp (-llama +k3):\n%s", c.name, cmp.Diff(r["prompt"], got))
					continue
				case c.in.AddGenerationPrompt:
					gen, err := tmpl.GenerationPrompt(c.in)
					if err != nil {
						t.Errorf("%s: generation prompt: %v", c.name, err)
						continue
					}
					if !cmp.Equal(r["generation_prompt"], gen) {
						t.Errorf("%s: generation prompt differs (-llama +k3):\n%s", c.name, cmp.Diff(r["generation_prompt"], gen))
						continue
					}
				}
				agree++
			}
			t.Logf("%s: %d/%d conversations agree with llama.cpp (identical text, or both refuse)", name, agree, len(convs))
		})
	}
}
