package ops

import (
	"math"
	"testing"
)

// TestRopePlain: without scaling, the cache is cos and sin of
// pos·base^(-i/dims) (ggml's iterated product agrees to rounding), and
// NEOX rotation is NORMAL rotation of the pairs (i, i+dims/2) laid side by
// side.
func TestRopePlain(t *testing.T) {
	r := Rope{Dims: 16, Base: 10000, FreqScale: 1, AttnFactor: 1, BetaFast: 32, BetaSlow: 1, CtxOrig: 4096}
	cache := make([]float32, r.Dims)
	for _, pos := range []int{0, 1, 7, 300} {
		r.Cache(pos, cache)
		for i := 0; i < r.Dims; i += 2 {
			th := float64(pos) * math.Pow(10000, -float64(i)/float64(r.Dims))
			if d := math.Abs(float64(cache[i]) - math.Cos(th)); d > 1e-4 {
				t.Errorf("pos %d pair %d: cos %v, want %v", pos, i/2, cache[i], math.Cos(th))
			}
			if d := math.Abs(float64(cache[i+1]) - math.Sin(th)); d > 1e-4 {
				t.Errorf("pos %d pair %d: sin %v, want %v", pos, i/2, cache[i+1], math.Sin(th))
			}
		}
	}
	r.Cache(5, cache)
	x := make([]float32, r.Dims)
	for i := range x {
		x[i] = float32(i) - 7.5
	}
	neox := append([]float32(nil), x...)
	nr := r
	nr.Neox = true
	nr.Apply(neox, cache)
	inter := make([]float32, r.Dims) // (i, i+dims/2) -> (2i, 2i+1)
	for i := 0; i < r.Dims/2; i++ {
		inter[2*i], inter[2*i+1] = x[i], x[i+r.Dims/2]
	}
	r.Apply(inter, cache)
	for i := 0; i < r.Dims/2; i++ {
		if neox[i] != inter[2*i] || neox[i+r.Dims/2] != inter[2*i+1] {
			t.Fatalf("NEOX pair %d: %v %v, NORMAL gives %v %v", i, neox[i], neox[i+r.Dims/2], inter[2*i], inter[2*i+1])
		}
	}
}

// TestRopeYaRN: with YaRN the high-frequency pairs keep their
// extrapolated angle and the low-frequency ones are interpolated by
// FreqScale, and every value is scaled by AttnFactor·(1+0.1·ln(factor)).
func TestRopeYaRN(t *testing.T) {
	r := Rope{Dims: 64, Base: 10000, FreqScale: 1.0 / 40, ExtFactor: 1, AttnFactor: 1, BetaFast: 32, BetaSlow: 1, CtxOrig: 4096}
	cache := make([]float32, r.Dims)
	const pos = 1000
	r.Cache(pos, cache)
	m := 1 + 0.1*math.Log(40)
	for _, i := range []int{0, r.Dims - 2} {
		th := float64(pos) * math.Pow(10000, -float64(i)/float64(r.Dims))
		if i > 0 {
			th /= 40 // the lowest frequency is fully interpolated
		}
		if d := math.Abs(float64(cache[i]) - m*math.Cos(th)); d > 1e-3 {
			t.Errorf("pair %d: cos %v, want %v", i/2, cache[i], m*math.Cos(th))
		}
	}
}
