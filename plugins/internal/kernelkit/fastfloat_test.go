package kernelkit

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// fma32 must be x·y+z rounded once to nearest even float32: checked
// against math/big's exact sum on operands over float32's whole range,
// subnormals included, and on sums built to land near a float32 midpoint
// (where rounding twice, in float64 then float32, goes wrong).
func TestFMA32(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rnd := func() float32 {
		switch r.IntN(4) {
		case 0: // any bits
			for {
				if f := math.Float32frombits(r.Uint32()); !math.IsNaN(float64(f)) && !math.IsInf(float64(f), 0) {
					return f
				}
			}
		case 1: // subnormal
			return math.Float32frombits(r.Uint32()&0x7fffff | r.Uint32()&0x80000000)
		default: // moderate
			return float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-20)))
		}
	}
	want := func(x, y, z float32) float32 {
		p := new(big.Float).SetPrec(0).SetMode(big.ToNearestEven)
		p.Mul(big.NewFloat(float64(x)).SetPrec(200), big.NewFloat(float64(y)).SetPrec(200))
		p.Add(p, big.NewFloat(float64(z)).SetPrec(200))
		f, _ := p.Float32()
		return f
	}
	midpoint := 0
	for i := range 200_000 {
		x, y, z := rnd(), rnd(), rnd()
		if i%4 == 0 {
			// (1+2^-12)(1-2^-12+2^-24) = 1+2^-36: z + x·y is a hair
			// (2^-60 of z) from the float32 midpoint z + ulp(z)/2, below
			// float64's resolution there: rounding in float64 first lands
			// on the midpoint, and then to even, the wrong way.
			e := r.IntN(200) - 100
			z = float32(math.Ldexp(1+float64(r.IntN(1<<10))*0x1p-23, e))
			z = math.Float32frombits(math.Float32bits(z) &^ 1) // even: the tie goes down
			x = 1 + 0x1p-12
			y = float32(math.Ldexp(1-0x1p-12+0x1p-24, math.Ilogb(float64(z))-24))
			if r.IntN(2) == 0 {
				x, z = -x, -z
			}
			midpoint++
		}
		got, exp := fma32(x, y, z), want(x, y, z)
		if math.Float32bits(got) != math.Float32bits(exp) && !(got == 0 && exp == 0) {
			t.Fatalf("fma32(%g, %g, %g) = %g (%#x), want %g (%#x)", x, y, z, got, math.Float32bits(got), exp, math.Float32bits(exp))
		}
	}
	if got := fma32(float32(math.Inf(1)), 1, 1); !math.IsInf(float64(got), 1) {
		t.Errorf("fma32(+Inf, 1, 1) = %g", got)
	}
	t.Logf("%d near-midpoint cases", midpoint)
}
