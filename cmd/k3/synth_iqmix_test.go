package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/core/synth"
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

// TestInspectIQMix: inspect reports an iq2_xxs-moe file's routed experts
// at IQ2_XXS's 2.0625 and IQ2_XS's 2.3125 bits per weight, and one token's
// routed bytes below the q2_k file of the same shapes by exactly the ratio
// of their expert bytes.
func TestInspectIQMix(t *testing.T) {
	streaming := func(typ string) streamingEstimate {
		path := filepath.Join(t.TempDir(), typ+".gguf")
		var stdout, stderr bytes.Buffer
		if rc := runMain([]string{"synth", "-o", path, "--type", typ, "--n-latent", "256", "--n-vocab", "512", "--workers", "2"},
			&stdout, &stderr); rc != 0 {
			t.Fatalf("rc %d: %s", rc, stderr.String())
		}
		rc, out, errOut := runInspectArgs(t, path, "--json")
		if rc != 0 {
			t.Fatalf("rc %d: %s", rc, errOut)
		}
		var rep inspectReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Streaming
	}
	iq, q2 := streaming("iq2_xxs-moe"), streaming("q2_k")
	bpw := map[string]float64{}
	for _, rt := range iq.RoutedTypes {
		bpw[rt.Type] = rt.BitsPerWeight
	}
	if d := cmp.Diff(map[string]float64{"iq2_xxs": 2.0625, "iq2_xs": 2.3125}, bpw); d != "" {
		t.Errorf("routed types (-want +got):\n%s", d)
	}
	if iq.RoutedTokenBytes+iq.AlwaysTokenBytes != iq.DecodeTokenBytes || iq.RoutedTokenBytes <= 0 {
		t.Errorf("token bytes: routed %d + always %d != %d", iq.RoutedTokenBytes, iq.AlwaysTokenBytes, iq.DecodeTokenBytes)
	}
	// every MoE layer's experts shrink alike, so per-token and whole-file
	// routed bytes shrink by the same factor
	if iq.RoutedTokenBytes*q2.RoutedBytes != q2.RoutedTokenBytes*iq.RoutedBytes || iq.RoutedBytes >= q2.RoutedBytes {
		t.Errorf("routed per token %d vs %d, in the file %d vs %d", iq.RoutedTokenBytes, q2.RoutedTokenBytes, iq.RoutedBytes, q2.RoutedBytes)
	}
	t.Logf("routed bytes per token: iq2_xxs-moe %d (%.4g bpw), q2_k %d (%.4g bpw)", iq.RoutedTokenBytes, iq.RoutedBitsPerWeight,
		q2.RoutedTokenBytes, q2.RoutedBitsPerWeight)
}

// TestIQMixFileTypeNames: each mix's general.file_type is llama_ftype's
// value for its routed gate/up type, and bench names it so.
func TestIQMixFileTypeNames(t *testing.T) {
	for _, name := range synth.OutTypes() {
		base, ok := strings.CutSuffix(name, "-moe")
		if !ok {
			continue
		}
		ot, err := synth.ParseOutType(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := fileTypeName(uint64(ot.FileType())); got != strings.ToUpper(base) {
			t.Errorf("%s: file type %d is named %q", name, ot.FileType(), got)
		}
	}
}
