package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttendTiledMany: Attend's tiled path (queries grouped by the key and
// value they share, each tile converted once per group of tokens) gives
// every query the bits of AttendTiled alone, for MLA's one shared row, GQA
// groups and odd sizes, at several positions and thread counts, with the
// assembly and with the Go loops.
func TestAttendTiledMany(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	type layout struct {
		name  string
		heads int
		kvOf  func(h int) HalfKV
		st    int
		dk    int
		dv    int
	}
	layouts := []layout{
		// MLA absorbed: every head reads one latent row (V its first DV values).
		{"mla", 5, func(int) HalfKV { return HalfKV{Stride: 72, DK: 72, DV: 64} }, 72, 72, 64},
		// GQA: 6 query heads on 2 key/value heads.
		{"gqa", 6, func(h int) HalfKV {
			g := h / 3
			return HalfKV{Stride: 2 * 80, KOff: g * 40, DK: 40, VOff: 80 + g*40, DV: 40}
		}, 160, 40, 40},
		{"odd", 3, func(h int) HalfKV { return HalfKV{Stride: 37, KOff: 1, DK: 19, VOff: 20, DV: 17} }, 37, 19, 17},
	}
	asm := [3]any{tileScores, tileAccum, widenHalf}
	defer func() {
		tileScores = asm[0].(func([]float32, []float32, *[flashTileKV]float32))
		tileAccum = asm[1].(func([]float32, []float32, []float32, int))
		widenHalf = asm[2].(func([]float32, []uint16))
	}()
	for _, impl := range []string{"asm", "go"} {
		if impl == "go" {
			tileScores, tileAccum, widenHalf = tileScoresGo, tileAccumGo, widenHalfGo
		}
		for _, lay := range layouts {
			for _, mag := range []float64{0.05, 1, 30} {
				for _, c := range [][2]int{{64, 0}, {65, 0}, {100, 37}, {64, 130}, {150, 1}} {
					n, pos := c[0], c[1]
					rows := halfCache(r, pos+n, lay.st, mag)
					qStride, outStride := lay.heads*lay.dk+3, lay.heads*lay.dv+1
					q := randVec(r, n*qStride)
					for i := range q {
						q[i] *= float32(mag)
					}
					scale := float32(1 / math.Sqrt(float64(lay.dk)))
					want := make([]float32, n*outStride)
					for tk := 0; tk < n; tk++ {
						for h := 0; h < lay.heads; h++ {
							kv := lay.kvOf(h)
							kv.Data = rows
							AttendTiled(q[tk*qStride+h*lay.dk:][:lay.dk], kv, pos+tk+1, scale, want[tk*outStride+h*lay.dv:][:lay.dv])
						}
					}
					for _, threads := range []int{1, 2, 3} {
						got := make([]float32, n*outStride)
						NewPool(threads).Attend(Causal{N: n, Pos: pos, Heads: lay.heads, Scale: scale}, q, qStride, lay.kvOf, rows, got, outStride)
						sameBits(t, fmt.Sprintf("%s/%s/mag %g/n %d pos %d/%d threads", impl, lay.name, mag, n, pos, threads), got, want)
					}
				}
			}
		}
	}
}

// BenchmarkAttendTiled is a prefill chunk's attention in an MLA layer of
// Kimi K2's width (16 heads here, 576-wide rows, 512 values).
func BenchmarkAttendTiled(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	const heads, dk, dv = 16, 576, 512
	for _, n := range []int{64, 512} {
		rows := halfCache(r, n, dk, 1)
		q := randVec(r, n*heads*dk)
		out := make([]float32, n*heads*dv)
		kvOf := func(int) HalfKV { return HalfKV{Stride: dk, DK: dk, DV: dv} }
		for _, mode := range []string{"many", "one"} {
			b.Run(fmt.Sprintf("n%d/%s", n, mode), func(b *testing.B) {
				p := NewPool(1)
				for b.Loop() {
					if mode == "many" {
						p.Attend(Causal{N: n, Heads: heads, Scale: 0.04}, q, heads*dk, kvOf, rows, out, heads*dv)
						continue
					}
					for t := 0; t < n; t++ {
						for h := 0; h < heads; h++ {
							kv := kvOf(h)
							kv.Data = rows
							AttendTiled(q[(t*heads+h)*dk:][:dk], kv, t+1, 0.04, out[(t*heads+h)*dv:][:dv])
						}
					}
				}
			})
		}
	}
}
