package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
)

// TestSynthDeepSeek2: --arch deepseek2 takes the deepseek2 presets, scaled
// by the shared shape flags; an unknown architecture or preset is refused.
func TestSynthDeepSeek2(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.gguf")
	var stdout, stderr bytes.Buffer
	args := []string{"synth", "-o", out, "--arch", "deepseek2", "--preset", "kimi-k2", "--n-layer", "2", "--n-embd", "256",
		"--n-head", "2", "--n-vocab", "512", "--n-ff", "256", "--n-expert", "8", "--n-ff-exp", "256", "--q-lora-rank", "64",
		"--kv-lora-rank", "64", "--qk-nope", "32", "--qk-rope", "16", "--v-head", "32", "--type", "q4_k_m"}
	if rc := runMain(args, &stdout, &stderr); rc != 0 {
		t.Fatalf("rc %d, stderr: %s", rc, stderr.String())
	}
	f, err := gguf.Open(strings.SplitN(stdout.String(), "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Arch() != "deepseek2" || f.Uint("block_count", 0) != 2 || f.Uint("expert_count", 0) != 8 ||
		f.String("tokenizer.ggml.pre", "") != "kimi-k2" || f.Float("rope.freq_base", 0) != 50000 {
		t.Errorf("arch %s, %d layers, %d experts, pre %q, base %v", f.Arch(), f.Uint("block_count", 0), f.Uint("expert_count", 0),
			f.String("tokenizer.ggml.pre", ""), f.Float("rope.freq_base", 0))
	}
	if _, ok := f.Tensor("blk.1.attn_k_b.weight"); !ok {
		t.Error("no attn_k_b")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--arch", "llama"}, "unknown architecture"},
		{[]string{"--arch", "deepseek2", "--preset", "k3"}, "unknown deepseek2 preset"},
	} {
		stderr.Reset()
		if rc := runMain(append([]string{"synth", "-o", "x.gguf"}, tc.args...), &stdout, &stderr); rc != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: rc %d, stderr %q; want %q", tc.args, rc, stderr.String(), tc.want)
		}
	}
}
