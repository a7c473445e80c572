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
		{"partial-linear", Rope{Dims: 4, Neox: true, Base: 1e6, Scale: 0.25}},
		{"yarn", Rope{Dims: 8, Neox: true, Base: 10000, Scale: 0.25, ExtFactor: 1, AttnFactor: 0.9, BetaFast: 32, BetaSlow: 1, CtxOrig: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			x := make([]float32, 2*heads*hd)
			for i := range x {
				x[i] = float32(i%7) - 2.5
			}
			in := append([]float32(nil), x...)
			r.Apply(x, 2, heads, hd, pos)
			scale := float64(r.Scale)
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
