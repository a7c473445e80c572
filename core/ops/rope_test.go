package ops

import (
	"math"
	"testing"
)

// TestRope checks Rope against the textbook rotation in float64: NEOX
// pairs (i, i+d/2), normal pairs (2i, 2i+1), values past Dims untouched,
// linear scaling dividing the angle, YaRN leaving the fastest-turning
// dimensions extrapolated and scaling the magnitude by its attention factor.
func TestRope(t *testing.T) {
	const heads, hd, pos = 2, 8, 5
	for _, tc := range []struct {
		name string
		r    Rope
	}{
		{"neox", Rope{Dims: 8, Neox: true, Base: 10000}},
		{"normal", Rope{Dims: 8, Base: 10000}},
		{"partial-linear", Rope{Dims: 4, Neox: true, Base: 1e6, FreqScale: 0.25}},
		{"yarn", Rope{Dims: 8, Neox: true, Base: 10000, FreqScale: 0.25, ExtFactor: 1, AttnFactor: 0.9, BetaFast: 32, BetaSlow: 1, CtxOrig: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			x := make([]float32, 2*heads*hd)
			for i := range x {
				x[i] = float32(i%7) - 2.5
			}
			in := append([]float32(nil), x...)
			r.Apply(x, 2, heads, hd, pos)
			scale := float64(r.FreqScale)
			if scale == 0 {
				scale = 1
			}
			corr := r.corrDims()
			for tok := 0; tok < 2; tok++ {
				for h := 0; h < heads; h++ {
					off := (tok*heads + h) * hd
					for i := 0; i < r.Dims/2; i++ {
						a, b := 2*i, 2*i+1
						if r.Neox {
							a, b = i, i+r.Dims/2
						}
						extrap := float64(pos+tok) * math.Pow(float64(r.Base), -2*float64(i)/float64(r.Dims))
						theta, ms := scale*extrap, 1.0
						if r.ExtFactor != 0 {
							y := (float64(i) - float64(corr[0])) / math.Max(0.001, float64(corr[1]-corr[0]))
							mix := 1 - math.Min(1, math.Max(0, y))
							theta = theta*(1-mix) + extrap*mix
							ms = float64(r.AttnFactor) * (1 + 0.1*math.Log(1/scale))
						}
						c, s := math.Cos(theta)*ms, math.Sin(theta)*ms
						x0, x1 := float64(in[off+a]), float64(in[off+b])
						for _, w := range []struct {
							got  float32
							want float64
						}{{x[off+a], x0*c - x1*s}, {x[off+b], x0*s + x1*c}} {
							if math.Abs(float64(w.got)-w.want) > 1e-4*(1+math.Abs(w.want)) {
								t.Fatalf("token %d head %d pair %d: %g, want %g", tok, h, i, w.got, w.want)
							}
						}
					}
					for i := r.Dims; i < hd; i++ {
						if x[off+i] != in[off+i] {
							t.Fatalf("value %d past the rotated dims changed", i)
						}
					}
				}
			}
		})
	}
}

// TestSwiGLU: SiLU(gate)·up, the vector exponential agreeing with expf to
// about an ulp.
func TestSwiGLU(t *testing.T) {
	gate := []float32{-9, -1.5, -0.25, 0, 0.3, 1, 2.5, 7, 12, -3, 0.7}
	up := []float32{1, 2, -1, 3, 0.5, -2, 1.5, 1, -0.5, 2, 4}
	want := make([]float32, len(gate))
	for i := range gate {
		want[i] = SiLU(gate[i]) * up[i]
	}
	SwiGLU(gate, up)
	for i := range gate {
		if d := math.Abs(float64(gate[i] - want[i])); d > 4e-7*math.Abs(float64(want[i]))+1e-12 {
			t.Errorf("element %d: %g, want %g", i, gate[i], want[i])
		}
	}
}

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
	nr.Rotate(neox, cache)
	inter := make([]float32, r.Dims) // (i, i+dims/2) -> (2i, 2i+1)
	for i := 0; i < r.Dims/2; i++ {
		inter[2*i], inter[2*i+1] = x[i], x[i+r.Dims/2]
	}
	r.Rotate(inter, cache)
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
