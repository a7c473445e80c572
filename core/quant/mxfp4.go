package quant

import "math"

// MXFP4 (OCP microscaling FP4): blocks of 32 E2M1 codes sharing one E8M0
// exponent byte.
//
//	e uint8 | qs[16]   value = kvaluesMXFP4[code] * 2^(e-128)
//
// The table holds doubled E2M1 values so that it fits int8, hence the halved
// scale. Its dot product runs against Q8_0 activations.

var kvaluesMXFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

func init() {
	register(MXFP4, &impl{dequantize: dequantizeMXFP4, quantize: quantizeMXFP4, vecDot: vecDotMXFP4})
}

func dequantizeMXFP4(src []byte, dst []float32) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[17*i : 17*i+17]
		d := E8M0ToFP32Half(b[0])
		y := dst[32*i : 32*i+32]
		for j := 0; j < 16; j++ {
			y[j] = float32(kvaluesMXFP4[b[1+j]&0x0F]) * d
			y[j+16] = float32(kvaluesMXFP4[b[1+j]>>4]) * d
		}
	}
}

// bestIndexMXFP4 is the code whose scaled value is nearest x, the first one
// on ties (so +0 wins over -0).
func bestIndexMXFP4(x, e float32) uint8 {
	best := 0
	bestErr := abs32(float32(float32(kvaluesMXFP4[0])*e) - x)
	for i := 1; i < 16; i++ {
		if err := abs32(float32(float32(kvaluesMXFP4[i])*e) - x); err < bestErr {
			best, bestErr = i, err
		}
	}
	return uint8(best)
}

// mxfp4Exponent picks the shared exponent so that amax lands in the top
// E2M1 binade: floor(log2(amax)) - 2 + 127 as float32, converted to a byte as
// C does (which wraps for amax below 2^-125).
func mxfp4Exponent(amax float32) uint8 {
	if !(amax > 0) {
		return 0
	}
	l := float32(math.Floor(float64(log2f(amax))))
	return uint8(cvtt(l - 2 + 127))
}

// log2f is log2 rounded to float32. math.Log2 is accurate to well under a
// float32 ulp, and exact at powers of two, which is all the floor needs.
func log2f(x float32) float32 { return float32(math.Log2(float64(x))) }

func quantizeMXFP4(src []float32, dst []byte) {
	for i := 0; i < len(src)/32; i++ {
		x := src[32*i : 32*i+32]
		b := dst[17*i : 17*i+17]
		var amax float32
		for _, v := range x {
			if amax < abs32(v) {
				amax = abs32(v)
			}
		}
		e := mxfp4Exponent(amax)
		d := E8M0ToFP32Half(e)
		b[0] = e
		for j := 0; j < 16; j++ {
			b[1+j] = bestIndexMXFP4(x[j], d) | bestIndexMXFP4(x[j+16], d)<<4
		}
	}
}

func vecDotMXFP4(n int, w, a []byte) float32 {
	var sumf float32
	for ib := 0; ib < n/32; ib++ {
		x := w[17*ib : 17*ib+17]
		y := a[34*ib : 34*ib+34]
		d := float32(f16At(y) * E8M0ToFP32Half(x[0]))
		var sumi1, sumi2 int32
		for j := 0; j < 16; j++ {
			sumi1 += int32(int8(y[2+j])) * int32(kvaluesMXFP4[x[1+j]&0x0F])
			sumi2 += int32(int8(y[2+j+16])) * int32(kvaluesMXFP4[x[1+j]>>4])
		}
		sumf += float32(d * float32(sumi1+sumi2))
	}
	return sumf
}
