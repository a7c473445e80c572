package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/tools/parity"
)

// TestSynthIQMixParity writes a small file of each `k3 synth --type *-moe`
// mix (routed experts in IQ types, 256-wide expert rows so the IQ types
// apply), checks the routed experts' types, and holds k3 eval's greedy
// continuation to llama.cpp's reference CPU build on the same file.
func TestSynthIQMixParity(t *testing.T) {
	ref := parity.Require(t)
	for _, tc := range []struct {
		typ        string
		exps, down quant.Type
	}{
		{"iq1_s-moe", quant.IQ1_S, quant.IQ1_M},
		{"iq1_m-moe", quant.IQ1_M, quant.IQ2_XXS},
		{"iq2_xxs-moe", quant.IQ2_XXS, quant.IQ2_XS},
		{"iq3_xxs-moe", quant.IQ3_XXS, quant.IQ3_S},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.typ+".gguf")
			var stdout, stderr bytes.Buffer
			if rc := runMain([]string{"synth", "-o", path, "--type", tc.typ, "--n-latent", "256", "--n-vocab", "512", "--workers", "2"},
				&stdout, &stderr); rc != 0 {
				t.Fatalf("rc %d: %s", rc, stderr.String())
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, ti := range f.Tensors() {
				want := quant.Type(0)
				switch {
				case strings.Contains(ti.Name, "ffn_down_exps."):
					want = tc.down
				case strings.Contains(ti.Name, "_exps."):
					want = tc.exps
				case ti.Name == "output.weight":
					want = quant.Q6_K
				case ti.Name == "token_embd.weight", strings.Contains(ti.Name, "_shexp."):
					want = quant.Q4_K
				default:
					continue
				}
				n++
				if ti.Type != want {
					t.Errorf("%s is %s, want %s", ti.Name, ti.Type, want)
				}
			}
			f.Close()
			if n < 10 {
				t.Fatalf("checked only %d tensors", n)
			}
			prompt := []int32{5, 17, 300, 2, 99, 42, 7}
			want, err := ref.GreedyOpts(path, prompt, 16, parity.LogitsOptions{Threads: 2, CPU: parity.Generic, IgnoreEOG: true})
			if err != nil {
				t.Fatalf("llama.cpp: %v", err)
			}
			got := runEvalArgs(t, "-m", path, "--tokens", "5,17,300,2,99,42,7", "-n", "16", "-t", "2")
			if d := cmp.Diff(want, got.greedy[:len(want)]); d != "" {
				t.Errorf("greedy continuation (-llama.cpp +k3):\n%s", d)
			}
			t.Logf("%s: greedy %v", tc.typ, want)
		})
	}
}
