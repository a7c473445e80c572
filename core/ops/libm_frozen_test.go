package ops

import "math"

// Frozen copies of Tanhf and expm1f as they were before the fast path, the
// oracle the exhaustive checks compare the fast code against bit for bit.

// expm1fFrozen is fdlibm's single-precision expm1 as glibc ships it.
func expm1fFrozen(x float32) float32 {
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

// tanhfFrozen is fdlibm's tanhf as glibc ships it.
func tanhfFrozen(x float32) float32 {
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
		t := expm1fFrozen(two * float32(math.Abs(float64(x))))
		z = one - two/(t+two)
	default:
		t := expm1fFrozen(-two * float32(math.Abs(float64(x))))
		z = -t / (t + two)
	}
	if jx >= 0 {
		return z
	}
	return -z
}
