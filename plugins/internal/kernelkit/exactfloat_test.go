package kernelkit

import (
	"math"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

func TestExactFloatCheck(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	for _, c := range []struct {
		s, prefix, abs float64
		want           float32
		ok             bool
	}{
		{0, 0, 0, 0, true},
		{1, 1, 1, 1, true},
		{1 + 0x1p-24, 1, 1, 0, false}, // a float32 midpoint
		{1 + 0x1p-24 + 0x1p-40, 1, 1, 1 + 0x1p-23, true},
		{1e-50, 1e-50, 1e-50, 0, true}, // +0, never -0
		{-1e-50, 1e-50, 1e-50, float32(math.Copysign(0, -1)), true},
		{0x1p-150, 0x1p-150, 0x1p-150, 0, false}, // the midpoint of 0 and the smallest subnormal
		{inf, 1, 1, 0, false},
		{nan, 1, 1, 0, false},
		{1, 1, inf, 0, false},
		{1, nan, 1, 0, false},
		{1, 1, 0x1p127, 0, false}, // a product may have overflowed float32
	} {
		got, ok := exactFloatCheck(c.s, c.prefix, c.abs, 0)
		if ok != c.ok || ok && math.Float32bits(got) != math.Float32bits(c.want) {
			t.Errorf("exactFloatCheck(%g, %g, %g) = %g, %v; want %g, %v", c.s, c.prefix, c.abs, got, ok, c.want, c.ok)
		}
	}
}

// BenchmarkFloatPrep is what a MatVec on a plain float type spends once
// per activation row before its kernels run (a K3 router's 7168 columns).
func BenchmarkFloatPrep(b *testing.B) {
	for _, t := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		b.Run(t.String(), func(b *testing.B) {
			p := newFloatPrep(t, nil, 4, nil)
			n := 7168
			a := make([]byte, n*t.TypeSize())
			for i := range a {
				a[i] = byte(i * 7)
			}
			bp := new([]byte)
			b.SetBytes(int64(n))
			for b.Loop() {
				p.rows(a, n, 0, 1, bp)
			}
		})
	}
}
