package main

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/synth"
	kernelsavx2 "github.com/k3-inference/k3/plugins/kernels-avx2"
	kernelsavx512 "github.com/k3-inference/k3/plugins/kernels-avx512"
	"github.com/k3-inference/k3/tools/parity"
)

// TestKernelsParity is the kernels' end-to-end contract: on Q2_K, Q4_K_M,
// Q8_0 and F16 k3 synth models, every SIMD level of every kernels plugin
// this CPU runs gives the reference's logits bit for bit at every prompt
// position and the same greedy continuation — and that continuation is
// llama.cpp's, token for token, on its reference CPU backend
// (libggml-cpu-x64.so, whose arithmetic core/quant and core/ops reproduce).
// llama.cpp's native build (zen4 here) sums in another order and its own
// two builds disagree with each other; how far k3 is from it is logged.
func TestKernelsParity(t *testing.T) {
	names := kernelsUnderTest()
	if len(names) == 0 {
		t.Skip("no SIMD kernels on this CPU")
	}
	ref := parity.Require(t)
	const n = 32
	k3heads := func(c *synth.Config) {
		c.NEmbd, c.NHead, c.KDAHead, c.QLoRA, c.KVLoRA, c.QKNope, c.QKRope, c.VHead = 512, 4, 128, 256, 512, 128, 64, 128
		c.NLatent, c.NFFExp, c.NFF = 256, 256, 512
	}
	for _, tc := range []struct {
		typ   synth.OutType
		shape func(*synth.Config)
	}{
		{synth.TypeQ2_K, nil}, {synth.TypeQ2_K, k3heads}, {synth.TypeQ4_K_M, nil}, {synth.TypeQ4_K_M, k3heads},
		{synth.TypeQ8_0, nil}, {synth.TypeF16, nil}, {synth.TypeF32, nil},
	} {
		name := tc.typ.String()
		if tc.shape != nil {
			name += "-k3heads"
		}
		t.Run(name, func(t *testing.T) {
			if testing.Short() && tc.shape != nil {
				t.Skip("wider shapes skipped with -short")
			}
			cfg, _ := synth.Preset("tiny")
			cfg.Type = tc.typ
			if tc.shape != nil {
				tc.shape(&cfg)
			}
			path := filepath.Join(t.TempDir(), name+".gguf")
			if _, err := synth.Write(path, cfg, synth.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			want := runKernels(t, path, openKernelsBackend(t, config.Kernels{Name: "reference"}), n, nil)
			llama, err := ref.GreedyOpts(path, kernelsPrompt, n, parity.LogitsOptions{Threads: 2, CPU: parity.Generic, IgnoreEOG: true})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(llama, want.greedy); d != "" {
				t.Fatalf("the reference backend's greedy continuation differs from llama.cpp's reference build (-llama.cpp +k3):\n%s", d)
			}
			native, err := ref.GreedyOpts(path, kernelsPrompt, n, parity.LogitsOptions{Threads: 2, CPU: parity.Native, IgnoreEOG: true})
			if err != nil {
				t.Fatal(err)
			}
			same := 0
			for same < n && native[same] == want.greedy[same] {
				same++
			}
			t.Logf("llama.cpp's native build agrees with its reference build (and k3) on the first %d of %d tokens", same, n)
			for _, kn := range names {
				levels := []string{""} // the plugin's own choice, in process
				if !testing.Short() {
					levels = append(levels, kitLevels(kn)...)
				}
				for _, level := range levels {
					label := kn + "/" + level
					var b engine.Kernels
					if level == "" {
						label = kn + "/auto"
						b = openKernelsBackend(t, config.Kernels{Name: kn, Mode: "inprocess"})
					} else {
						b = openKernelsBackend(t, config.Kernels{Name: kn, Mode: "process"}, kernelsavx2.LevelEnv+"="+level)
					}
					got := runKernels(t, path, b, n, nil)
					if !bitsEqual(want.logits, got.logits) {
						t.Errorf("%s (%s): logits are not the reference's bit for bit (max rel diff %.3g)", label, b.Name(), maxRelDiff(want.logits, got.logits))
					}
					if d := cmp.Diff(llama, got.greedy); d != "" {
						t.Errorf("%s (%s): greedy differs from llama.cpp (-llama.cpp +k3):\n%s", label, b.Name(), d)
					}
				}
			}
			if tc.typ == synth.TypeF16 || tc.typ == synth.TypeF32 {
				fastParity(t, path, names, want, llama, n)
			}
		})
	}
}

// fastParity runs kernels.float fast (F32/F16/BF16 weights summed in float32
// lanes, kernelkit/fastfloat.go) on every level: its logits are one set of
// bits on all of them (the fast order is fixed), not the exact ones (the
// mode reached the products) but within 1e-3 relative of them, and its
// greedy continuation is still llama.cpp's.
func fastParity(t *testing.T, path string, names []string, exact kernelsRun, llama []int32, n int) {
	var first *kernelsRun
	for _, kn := range names {
		for _, level := range append([]string{""}, kitLevels(kn)...) {
			label, k, env := kn+"/"+level+"/fast", config.Kernels{Name: kn, Mode: "process", Float: "fast"}, []string{kernelsavx2.LevelEnv + "=" + level}
			if level == "" {
				label, k.Mode, env = kn+"/auto/fast", "inprocess", nil
			}
			b := openKernelsBackend(t, k, env...)
			got := runKernels(t, path, b, n, nil)
			if bitsEqual(exact.logits, got.logits) {
				t.Errorf("%s (%s): float fast gave the exact logits bit for bit: the mode did not reach the float products", label, b.Name())
			}
			if d := maxRelDiff(exact.logits, got.logits); d > 1e-3 {
				t.Errorf("%s (%s): logits %.3g from the exact ones", label, b.Name(), d)
			} else if first == nil {
				t.Logf("float fast: logits within %.3g (max relative) of exact", d)
			}
			if first == nil {
				first = &got
			} else if !bitsEqual(first.logits, got.logits) {
				t.Errorf("%s (%s): float fast logits differ between levels (max rel diff %.3g)", label, b.Name(), maxRelDiff(first.logits, got.logits))
			}
			if d := cmp.Diff(llama, got.greedy); d != "" {
				t.Errorf("%s (%s): greedy differs from llama.cpp (-llama.cpp +k3):\n%s", label, b.Name(), d)
			}
		}
	}
}

// kitLevels are a built-in kernels plugin's levels on this CPU.
func kitLevels(name string) []string {
	switch name {
	case "avx2":
		return kernelsavx2.Levels()
	case "avx512":
		return kernelsavx512.Levels()
	}
	panic(fmt.Sprintf("no kernels plugin %q", name))
}
