package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/synth"
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

// TestSynthQwen3CoderTemplate: the Qwen3-Coder preset writes Qwen3-Coder's
// chat template (k3 parses its replies as Qwen3-Coder's), --chat-template
// picks either template for any qwen3moe preset, and is refused for other
// architectures or unknown names.
func TestSynthQwen3CoderTemplate(t *testing.T) {
	out := filepath.Join(t.TempDir(), "q.gguf")
	shrink := []string{"--n-layer", "1", "--n-embd", "256", "--n-head", "4", "--n-head-kv", "2", "--head-dim", "32",
		"--n-expert", "4", "--n-expert-used", "2", "--n-ff-exp", "256", "--n-vocab", "1024", "--type", "f32"}
	template := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if rc := runMain(append(append([]string{"synth", "-o", out, "--arch", "qwen3moe"}, args...), shrink...), &stdout, &stderr); rc != 0 {
			t.Fatalf("%v: rc %d, stderr: %s", args, rc, stderr.String())
		}
		f, err := gguf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return f.String("tokenizer.chat_template", "")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--preset", "qwen3-coder-480b-a35b"}, synth.Qwen3CoderChatTemplate},
		{[]string{"--preset", "qwen3-coder-480b-a35b", "--chat-template", "qwen3"}, synth.Qwen3ChatTemplate},
		{[]string{"--preset", "tiny", "--chat-template", "qwen3-coder"}, synth.Qwen3CoderChatTemplate},
		{[]string{"--preset", "qwen3-30b-a3b"}, synth.Qwen3ChatTemplate},
	} {
		if got := template(tc.args...); got != tc.want {
			t.Errorf("%v: not the template wanted (%d bytes)", tc.args, len(got))
		}
	}
	if f := chat.DetectFormat(synth.Qwen3CoderChatTemplate); f != chat.FormatQwen3Coder {
		t.Errorf("Qwen3-Coder's template parses as %v", f)
	}
	for _, bad := range [][]string{{"--arch", "kimi-k3", "--chat-template", "qwen3-coder"}, {"--arch", "qwen3moe", "--chat-template", "qwen2"}} {
		var stdout, stderr bytes.Buffer
		if rc := runMain(append([]string{"synth", "-o", out}, bad...), &stdout, &stderr); rc != 1 || !strings.Contains(stderr.String(), "template") {
			t.Errorf("%v: rc %d, %s", bad, rc, stderr.String())
		}
	}
}
