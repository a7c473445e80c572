package kerneltest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/quant"

	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// BenchMatVec is a decode-sized matrix × vector (4096 rows of 4096) per
// type, level and thread count; the throughput is weight bytes per second.
// The "generic" level is the pure-Go reference.
func BenchMatVec(b *testing.B, k *kernelkit.Kit) {
	const rows, n = 4096, 4096
	keepLevel(b, k)
	for _, typ := range kernelTypes {
		r := rand.New(rand.NewPCG(5, uint64(typ)))
		w := randWeights(r, typ, rows*n)
		act := randActs(r, typ, n)
		out := make([]float32, rows)
		for _, lv := range k.Levels() {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%s/t%d", typ, lv, threads), func(b *testing.B) {
					if err := k.SetLevel(lv); err != nil {
						b.Fatal(err)
					}
					b.SetBytes(int64(len(w)))
					for b.Loop() {
						if err := k.MatVec(typ, w, rows, n, act, out, threads); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchQuantizeQ8K is QuantizeActivation of one 4096-element row to Q8_K
// per level; the throughput is input bytes per second.
func BenchQuantizeQ8K(b *testing.B, k *kernelkit.Kit) {
	keepLevel(b, k)
	r := rand.New(rand.NewPCG(6, 6))
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	dst := make([]byte, 4096/256*292)
	for _, lv := range k.Levels() {
		b.Run(lv, func(b *testing.B) {
			if err := k.SetLevel(lv); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(4 * int64(len(x)))
			for b.Loop() {
				if err := k.QuantizeActivation(quant.Q2_K, x, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchDot is one 4096-element row, hot in L1: the kernels' compute
// throughput without memory in the way.
func BenchDot(b *testing.B, k *kernelkit.Kit) {
	const n = 4096
	keepLevel(b, k)
	for _, typ := range kernelTypes {
		r := rand.New(rand.NewPCG(7, uint64(typ)))
		w := randWeights(r, typ, n)
		act := randActs(r, typ, n)
		for _, lv := range k.Levels() {
			b.Run(fmt.Sprintf("%s/%s", typ, lv), func(b *testing.B) {
				if err := k.SetLevel(lv); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(w)))
				f := k.DotFunc(typ) // the kernel alone, without Dot's size checks
				for b.Loop() {
					f(n, w, act)
				}
			})
		}
	}
}

// BenchMatMul is a prefill-sized matrix × matrix: 1024 weight rows of
// 4096 times 16 activation rows, one thread; bytes are weight bytes, so the
// ratio to BenchmarkMatVec shows what running four activation rows per
// pass over a weight block saves. Q4_K and Q5_K, the prefill of a Q4_K_M
// model, also run a 64-token batch on two of a model's shapes (named
// rows×columns×tokens; not the generic level, which takes seconds).
func BenchMatMul(b *testing.B, k *kernelkit.Kit) {
	keepLevel(b, k)
	benchMatMul(b, k, 1024, 4096, 16, "", kernelTypes)
	for _, s := range [][3]int{{3072, 7168, 64}, {4096, 4096, 64}} {
		benchMatMul(b, k, s[0], s[1], s[2], fmt.Sprintf("/%dx%dx%d", s[0], s[1], s[2]), []quant.Type{quant.Q4_K, quant.Q5_K})
	}
	// A decode step of several slots: rows run tile by tile.
	for _, m := range []int{2, 4} {
		benchMatMul(b, k, 4096, 7168, m, fmt.Sprintf("/4096x7168x%d", m), []quant.Type{quant.Q3_K, quant.Q6_K})
	}
}

func benchMatMul(b *testing.B, k *kernelkit.Kit, rows, n, m int, suffix string, types []quant.Type) {
	for _, typ := range types {
		r := rand.New(rand.NewPCG(8, uint64(typ)))
		w := randWeights(r, typ, rows*n)
		var act []byte
		for range m {
			act = append(act, randActs(r, typ, n)...)
		}
		out := make([]float32, rows*m)
		for _, lv := range k.Levels() {
			if suffix != "" && lv == "generic" {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s%s", typ, lv, suffix), func(b *testing.B) {
				if err := k.SetLevel(lv); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(w)) * int64(m))
				for b.Loop() {
					if err := k.MatMul(typ, w, rows, n, act, m, out, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// LevelTypes are LevelTable's type sets: "k", the K-quants, and "iq", the
// grid types.
var LevelTypes = map[string][]quant.Type{
	"k":  {quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K},
	"iq": {quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ3_XXS, quant.IQ3_S, quant.IQ1_S, quant.IQ1_M},
}

// LevelTable prints, for each of types, the best-of time of a matrix ×
// vector and of matrix × matrix products of a few activation rows at
// every level, one thread: the figures behind a plugin's preferred level.
// Best-of (not the mean) because the shared machines this runs on are
// rarely quiet; the minimum of many short runs is the uncontended time.
func LevelTable(t *testing.T, k *kernelkit.Kit, reps int, types []quant.Type) {
	keepLevel(t, k)
	const rows, n = 2048, 7168
	for _, typ := range types {
		r := rand.New(rand.NewPCG(8, uint64(typ)))
		w := randWeights(r, typ, rows*n)
		for _, m := range []int{1, 4, 8, 16} {
			var act []byte
			for range m {
				act = append(act, randActs(r, typ, n)...)
			}
			out := make([]float32, rows*m)
			line := fmt.Sprintf("%-7s m=%-2d", typ, m)
			for _, lv := range k.Levels() {
				if lv == "generic" {
					continue
				}
				if err := k.SetLevel(lv); err != nil {
					t.Fatal(err)
				}
				best := time.Duration(1 << 62)
				for range reps {
					t0 := time.Now()
					if err := k.MatMul(typ, w, rows, n, act, m, out, 1); err != nil {
						t.Fatal(err)
					}
					best = min(best, time.Since(t0))
				}
				line += fmt.Sprintf("  %s %7.1fus/row", lv, float64(best.Microseconds())/float64(m))
			}
			t.Log(line)
		}
	}
}
