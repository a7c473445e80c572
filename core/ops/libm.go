package ops

import (
	"math"
	"math/big"
)

// ggml calls the C library's expf and tanhf. glibc's results are not
// always the correctly rounded ones that float32(math.Exp(float64(x)))
// gives (expf differs in ~0.06% of arguments, tanhf in ~13%), and a last-bit
// difference can flip a later rounding, so k3 computes them with glibc's own
// algorithms (glibc 2.27+ expf from ARM's optimized routines; the fdlibm
// tanhf/expm1f glibc still ships). Checked bit for bit against glibc 2.36
// on millions of arguments.

// expfTab is glibc's __exp2f_data.tab: 2^(i/32) as float64 bits, minus
// i<<52/32 so that adding k<<47 scales it by 2^(k/32).
var expfTab [32]uint64

func init() {
	for i := range expfTab {
		v := new(big.Float).SetPrec(256).SetInt64(1 << i)
		for range 5 {
			v.Sqrt(v)
		}
		f, _ := v.Float64()
		expfTab[i] = math.Float64bits(f) - uint64(i)<<52/32
	}
}

// Expf is glibc's expf.
func Expf(x float32) float32 {
	const (
		n       = 32
		invLn2N = 0x1.71547652b82fep+0 * n
		shift   = 0x1.8p+52
		c0      = 0x1.c6af84b912394p-5 / n / n / n
		c1      = 0x1.ebfce50fac4f3p-3 / n / n
		c2      = 0x1.62e42ff0c52d6p-1 / n
	)
	bits := math.Float32bits(x)
	if (bits>>20)&0x7ff >= (math.Float32bits(88)>>20)&0x7ff {
		switch {
		case bits == math.Float32bits(float32(math.Inf(-1))):
			return 0
		case (bits>>20)&0x7ff >= 0x7f8:
			return x + x // +Inf or NaN
		case x > 0x1.62e42ep6:
			return float32(math.Inf(1))
		case x < -0x1.9fe368p6:
			return 0
		}
	}
	z := invLn2N * float64(x)
	kd := z + shift
	ki := math.Float64bits(kd)
	kd -= shift
	r := z - kd
	s := math.Float64frombits(expfTab[ki%n] + ki<<(52-5))
	p := float64(c0*r) + c1
	y := float64(c2*r) + 1
	y = float64(p*float64(r*r)) + y
	return float32(y * s)
}

func f32(u uint32) float32 { return math.Float32frombits(u) }

// expm1f is fdlibm's single-precision expm1 as glibc ships it.
func expm1f(x float32) float32 {
	const one, huge, tiny = float32(1), float32(1e30), float32(1e-30)
	ln2hi, ln2lo, invln2 := f32(0x3f317180), f32(0x3717f7d1), f32(0x3fb8aa3b)
	q1, q2, q3, q4, q5 := f32(0xbd088889), f32(0x3ad00d01), f32(0xb8a670cd), f32(0x36867e54), f32(0xb457edbb)
	hx := math.Float32bits(x)
	neg := hx&0x80000000 != 0
	hx &= 0x7fffffff
	if hx >= 0x4195b844 { // |x| >= 27 ln2
		if hx >= 0x42b17218 {
			if hx > 0x7f800000 {
				return x + x
			}
			if hx == 0x7f800000 {
				if neg {
					return -1
				}
				return x
			}
			if x > 8.8721679688e+01 {
				return float32(math.Inf(1))
			}
		}
		if neg {
			return tiny - one
		}
	}
	var hi, lo, c float32
	var k int32
	switch {
	case hx > 0x3eb17218: // |x| > ln2/2
		if hx < 0x3F851592 {
			if !neg {
				hi, lo, k = x-ln2hi, ln2lo, 1
			} else {
				hi, lo, k = x+ln2hi, -ln2lo, -1
			}
		} else {
			h := float32(0.5)
			if neg {
				h = -0.5
			}
			k = int32(float32(invln2*x) + h)
			t := float32(k)
			hi = x - float32(t*ln2hi)
			lo = float32(t * ln2lo)
		}
		x = hi - lo
		c = (hi - x) - lo
	case hx < 0x33000000: // |x| < 2^-25
		t := huge + x
		return x - (t - (huge + x))
	}
	hfx := float32(0.5 * x)
	hxs := float32(x * hfx)
	r1 := one + float32(hxs*(q1+float32(hxs*(q2+float32(hxs*(q3+float32(hxs*(q4+float32(hxs*q5)))))))))
	t := 3 - float32(r1*hfx)
	e := float32(hxs * float32((r1-t)/(6-float32(x*t))))
	if k == 0 {
		return x - (float32(x*e) - hxs)
	}
	e = float32(x*(e-c)) - c
	e -= hxs
	switch {
	case k == -1:
		return float32(0.5*(x-e)) - 0.5
	case k == 1:
		if x < -0.25 {
			return float32(-2 * (e - (x + 0.5)))
		}
		return one + float32(2*(x-e))
	case k <= -2 || k > 56:
		y := one - (e - x)
		if k == 128 {
			y = y * 2 * 0x1p127
		} else {
			y = f32(uint32(int32(math.Float32bits(y)) + k<<23))
		}
		return y - one
	case k < 23:
		t = f32(uint32(0x3f800000 - (0x1000000 >> k)))
		y := t - (e - x)
		return f32(uint32(int32(math.Float32bits(y)) + k<<23))
	default:
		t = f32(uint32((0x7f - k) << 23))
		y := x - (e + t)
		y += one
		return f32(uint32(int32(math.Float32bits(y)) + k<<23))
	}
}

// Tanhf is fdlibm's tanhf as glibc ships it. (A branch-free scalar version
// measured slower than these branches; tanhfSlice has an eight-lane one.)
func Tanhf(x float32) float32 {
	const one, two, tiny = float32(1), float32(2), float32(1e-30)
	jx := int32(math.Float32bits(x))
	ix := jx & 0x7fffffff
	if ix >= 0x7f800000 {
		if jx >= 0 {
			return one/x + one
		}
		return one/x - one
	}
	var z float32
	switch {
	case ix >= 0x41b00000: // |x| >= 22
		z = one - tiny
	case ix == 0:
		return x
	case ix < 0x24000000:
		return x * (one + x)
	case ix >= 0x3f800000:
		t := expm1f(two * float32(math.Abs(float64(x))))
		z = one - two/(t+two)
	default:
		t := expm1f(-two * float32(math.Abs(float64(x))))
		z = -t / (t + two)
	}
	if jx >= 0 {
		return z
	}
	return -z
}

// logfTab is glibc's __logf_data.tab (ARM optimized routines): for each of
// 16 subintervals of [0x3f330000, 2·0x3f330000) as float bits, 1/c and
// log(c) for a c near its centre.
var logfTab = [16][2]float64{
	{0x1.661ec79f8f3bep+0, -0x1.57bf7808caadep-2}, {0x1.571ed4aaf883dp+0, -0x1.2bef0a7c06ddbp-2},
	{0x1.49539f0f010b0p+0, -0x1.01eae7f513a67p-2}, {0x1.3c995b0b80385p+0, -0x1.b31d8a68224e9p-3},
	{0x1.30d190c8864a5p+0, -0x1.6574f0ac07758p-3}, {0x1.25e227b0b8ea0p+0, -0x1.1aa2bc79c8100p-3},
	{0x1.1bb4a4a1a343fp+0, -0x1.a4e76ce8c0e5ep-4}, {0x1.12358f08ae5bap+0, -0x1.1973c5a611cccp-4},
	{0x1.0953f419900a7p+0, -0x1.252f438e10c1ep-5}, {0x1.0000000000000p+0, 0},
	{0x1.e608cfd9a47acp-1, 0x1.aa5aa5df25984p-5}, {0x1.ca4b31f026aa0p-1, 0x1.c5e53aa362eb4p-4},
	{0x1.b2036576afce6p-1, 0x1.526e57720db08p-3}, {0x1.9c2d163a1aa2dp-1, 0x1.bc2860d224770p-3},
	{0x1.886e6037841edp-1, 0x1.1058bc8a07ee1p-2}, {0x1.767dcf5534862p-1, 0x1.4043057b6ee09p-2},
}

// Logf is glibc's logf (its FMA build, which x86-64 CPUs with FMA run).
func Logf(x float32) float32 {
	const (
		ln2 = 0x1.62e42fefa39efp-1
		a0  = -0x1.00ea348b88334p-2
		a1  = 0x1.5575b0be00b6ap-2
		a2  = -0x1.ffffef20a4123p-2
		off = 0x3f330000
	)
	ix := math.Float32bits(x)
	if ix == 0x3f800000 {
		return 0
	}
	if ix-0x00800000 >= 0x7f800000-0x00800000 {
		switch {
		case ix*2 == 0:
			return float32(math.Inf(-1))
		case ix == 0x7f800000:
			return x
		case ix&0x80000000 != 0 || ix*2 >= 0xff000000:
			return float32(math.NaN())
		}
		ix = math.Float32bits(x * 0x1p23) // subnormal: normalise
		ix -= 23 << 23
	}
	tmp := ix - off
	i := (tmp >> (23 - 4)) % 16
	k := int32(tmp) >> 23
	z := float64(math.Float32frombits(ix - tmp&(0x1ff<<23)))
	r := math.FMA(z, logfTab[i][0], -1)
	y0 := logfTab[i][1] + float64(k)*ln2
	r2 := r * r
	y := math.FMA(a1, r, a2)
	y = math.FMA(a0, r2, y)
	y = math.FMA(y, r2, y0+r)
	return float32(y)
}
