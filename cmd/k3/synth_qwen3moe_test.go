package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
)

// TestSynthQwen3MoE: `k3 synth --arch qwen3moe` writes the tiny preset, the
// shape flags scale a released preset, and the file carries Qwen's
// tokenizer setup and chat template.
func TestSynthQwen3MoE(t *testing.T) {
	out := filepath.Join(t.TempDir(), "q.gguf")
	var stdout, stderr bytes.Buffer
	args := []string{"synth", "-o", out, "--arch", "qwen3moe", "--preset", "qwen3-235b-a22b", "--n-layer", "2",
		"--n-embd", "256", "--n-head", "8", "--n-head-kv", "2", "--head-dim", "32", "--n-expert", "8",
		"--n-ff-exp", "256", "--n-vocab", "1024", "--rope-freq-base", "5e5", "--type", "q2_k"}
	if rc := runMain(args, &stdout, &stderr); rc != 0 {
		t.Fatalf("rc %d, stderr: %s", rc, stderr.String())
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Arch() != "qwen3moe" || f.Uint("block_count", 0) != 2 || f.Uint("attention.head_count_kv", 0) != 2 ||
		f.Uint("attention.key_length", 0) != 32 || f.Float("rope.freq_base", 0) != 5e5 || f.Uint("expert_used_count", 0) != 8 {
		t.Errorf("metadata: arch %s, blocks %d, kv heads %d, key length %d, rope base %g, used %d", f.Arch(), f.Uint("block_count", 0),
			f.Uint("attention.head_count_kv", 0), f.Uint("attention.key_length", 0), f.Float("rope.freq_base", 0), f.Uint("expert_used_count", 0))
	}
	if pre := f.String("tokenizer.ggml.pre", ""); pre != "qwen2" {
		t.Errorf("pre-tokenizer %q", pre)
	}
	if tmpl := f.String("tokenizer.chat_template", ""); !strings.Contains(tmpl, "<tool_call>") || !strings.Contains(tmpl, "<|im_start|>") {
		t.Error("not Qwen3's chat template")
	}
	if !strings.Contains(stdout.String(), "qwen3moe qwen3-235b-a22b, q2_k") {
		t.Errorf("summary: %s", stdout.String())
	}
	stderr.Reset()
	if rc := runMain([]string{"synth", "-o", out, "--arch", "qwen3moe", "--preset", "k3"}, &stdout, &stderr); rc != 1 ||
		!strings.Contains(stderr.String(), "unknown qwen3moe preset") {
		t.Errorf("kimi preset for qwen3moe: rc %d, %s", rc, stderr.String())
	}
}
