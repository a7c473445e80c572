package synth

import (
	"fmt"
	"math"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
)

// TestRealisticRoutingDeterministic: a realistic-routing file is the same
// bytes for any worker count, and not the random file.
func TestRealisticRoutingDeterministic(t *testing.T) {
	real := func(c *Config) { c.Routing = RoutingRealistic; c.NExpert = 136 } // pooled expert tensors too
	a, _ := writeTiny(t, TypeQ2_K, WriteOptions{Workers: 1}, real)
	b, _ := writeTiny(t, TypeQ2_K, WriteOptions{Workers: 3}, real)
	c, _ := writeTiny(t, TypeQ2_K, WriteOptions{Workers: 3}, func(c *Config) { c.NExpert = 136 })
	ha, hb, hc := fileHash(t, a.Paths), fileHash(t, b.Paths), fileHash(t, c.Paths)
	if ha != hb {
		t.Error("realistic routing with 1 and 3 workers gave different files")
	}
	if ha == hc {
		t.Error("realistic and random routing gave the same file")
	}
	if _, err := Write(t.TempDir()+"/x.gguf", func() Config { c := tinyConfig(); c.Routing = "clever"; return c }(), WriteOptions{}); err == nil {
		t.Error("unknown routing accepted")
	}
}

// TestRealisticRouterRows: every realistic router row reads only the
// router subspace, with the same norm for every expert (even popularity),
// exp_probs_b is zero, and the FFN outputs leave the subspace alone while
// the attention outputs write it.
func TestRealisticRouterRows(t *testing.T) {
	for _, arch := range Archs {
		t.Run(arch, func(t *testing.T) {
			cfg, err := ArchPreset(arch, "tiny")
			if err != nil {
				t.Fatal(err)
			}
			cfg.Routing, cfg.Type = RoutingRealistic, TypeQ8_0
			res, err := Write(t.TempDir()+"/m.gguf", cfg, WriteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(res.Paths[0])
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			s, E := routeDims(&cfg), cfg.NEmbd
			il := cfg.NLayer - 1 // a MoE layer in every preset
			get := func(name string) []float32 {
				ti, ok := f.Tensor(name)
				if !ok {
					t.Fatalf("no %s", name)
				}
				return values(t, f, ti)
			}
			router := get(blkName(il, "ffn_gate_inp.weight"))
			for e := range cfg.NExpert {
				row := router[e*E : (e+1)*E]
				var n float64
				for j, v := range row {
					if j >= s && v != 0 {
						t.Fatalf("expert %d reads coordinate %d outside the router subspace", e, j)
					}
					n += float64(v) * float64(v)
				}
				if math.Abs(math.Sqrt(n)-routerGain) > 1e-4 {
					t.Fatalf("expert %d: router row norm %g, want %g", e, math.Sqrt(n), routerGain)
				}
			}
			if ti, ok := f.Tensor(blkName(il, "exp_probs_b.bias")); ok {
				for _, v := range values(t, f, ti) {
					if v != 0 {
						t.Fatalf("exp_probs_b %g, want 0", v)
					}
				}
			}
			rowNorm := func(w []float32, row int) float64 {
				n := len(w) / E
				var sum float64
				for _, v := range w[row*n : (row+1)*n] {
					sum += float64(v) * float64(v)
				}
				return sum
			}
			out := get(blkName(il, "attn_output.weight"))
			if rowNorm(out, 0) == 0 || rowNorm(out, s-1) == 0 {
				t.Error("attention output does not write the router subspace")
			}
			down := "ffn_down_shexp.weight"
			if arch == ArchQwen3MoE {
				down = "ffn_down_exps.weight" // its experts write the stream
			}
			w := get(blkName(il, down))
			if arch == ArchQwen3MoE {
				w = w[:len(w)/cfg.NExpert] // expert 0
			}
			if rowNorm(w, 0) != 0 || rowNorm(w, s-1) != 0 || rowNorm(w, s) == 0 {
				t.Errorf("%s: router-subspace rows not zero, or later rows zero", down)
			}
		})
	}
}

func blkName(il int, s string) string { return fmt.Sprintf("blk.%d.%s", il, s) }
