package quant

import "math"

// Q4_0 and Q4_1: blocks of 32 weights as 4-bit codes, element j in the low
// nibble of qs[j] and element j+16 in its high nibble.
//
//	q4_0: d fp16 | qs[16]          value = (code-8)*d
//	q4_1: d fp16 | m fp16 | qs[16] value = code*d + m
//
// Q4_0's dot product runs against Q8_0 activations, Q4_1's against Q8_1
// (whose per-block sum folds in the minimum).

const qk4 = 32

func init() {
	register(Q4_0, &impl{dequantize: dequantizeQ4_0, quantize: quantizeQ4_0, vecDot: vecDotQ4_0})
	register(Q4_1, &impl{dequantize: dequantizeQ4_1, quantize: quantizeQ4_1, vecDot: vecDotQ4_1})
}

func dequantizeQ4_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk4; i++ {
		b := src[18*i : 18*i+18]
		d := f16At(b)
		y := dst[qk4*i : qk4*i+qk4]
		for j := 0; j < 16; j++ {
			y[j] = float32(int(b[2+j]&0x0F)-8) * d
			y[j+16] = float32(int(b[2+j]>>4)-8) * d
		}
	}
}

// absMaxSigned returns the element of largest magnitude with its sign; the
// first one wins ties, as in ggml's strict comparison.
func absMaxSigned(x []float32) float32 {
	var amax, max float32
	for _, v := range x {
		if amax < abs32(v) {
			amax = abs32(v)
			max = v
		}
	}
	return max
}

// reciprocal is ggml's "d ? 1.0f/d : 0.0f".
func reciprocal(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

func quantizeQ4_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk4; i++ {
		x := src[qk4*i : qk4*i+qk4]
		b := dst[18*i : 18*i+18]
		d := absMaxSigned(x) / -8
		id := reciprocal(d)
		putF16(b, d)
		for j := 0; j < 16; j++ {
			// float32() keeps Go from fusing the scale into the offset add.
			x0 := min(15, int(int8(cvtt(float32(x[j]*id)+8.5))))
			x1 := min(15, int(int8(cvtt(float32(x[j+16]*id)+8.5))))
			b[2+j] = uint8(x0) | uint8(x1)<<4
		}
	}
}

func vecDotQ4_0(n int, w, a []byte) float32 {
	var sumf float32
	for ib := 0; ib < n/qk4; ib++ {
		x := w[18*ib : 18*ib+18]
		y := a[34*ib : 34*ib+34]
		var sumi0, sumi1 int32
		for j := 0; j < 16; j++ {
			sumi0 += (int32(x[2+j]&0x0F) - 8) * int32(int8(y[2+j]))
			sumi1 += (int32(x[2+j]>>4) - 8) * int32(int8(y[2+j+16]))
		}
		// C: sumi*dx*dy, left to right, each product rounded.
		sumf += float32(float32(float32(sumi0+sumi1)*f16At(x)) * f16At(y))
	}
	return sumf
}

func dequantizeQ4_1(src []byte, dst []float32) {
	for i := 0; i < len(dst)/qk4; i++ {
		b := src[20*i : 20*i+20]
		d, m := f16At(b), f16At(b[2:])
		y := dst[qk4*i : qk4*i+qk4]
		for j := 0; j < 16; j++ {
			y[j] = float32(float32(b[4+j]&0x0F)*d) + m
			y[j+16] = float32(float32(b[4+j]>>4)*d) + m
		}
	}
}

// minMax returns the smallest and largest element, starting from ±FLT_MAX as
// ggml does (so a block of infinities keeps the FLT_MAX bounds).
func minMax(x []float32) (lo, hi float32) {
	lo, hi = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}

func quantizeQ4_1(src []float32, dst []byte) {
	for i := 0; i < len(src)/qk4; i++ {
		x := src[qk4*i : qk4*i+qk4]
		b := dst[20*i : 20*i+20]
		lo, hi := minMax(x)
		d := (hi - lo) / 15
		id := reciprocal(d)
		putF16(b, d)
		putF16(b[2:], lo)
		for j := 0; j < 16; j++ {
			x0 := min(15, int(int8(cvtt(float32((x[j]-lo)*id)+0.5))))
			x1 := min(15, int(int8(cvtt(float32((x[j+16]-lo)*id)+0.5))))
			b[4+j] = uint8(x0) | uint8(x1)<<4
		}
	}
}

func vecDotQ4_1(n int, w, a []byte) float32 {
	var sumf float32
	for ib := 0; ib < n/qk4; ib++ {
		x := w[20*ib : 20*ib+20]
		y := a[36*ib : 36*ib+36]
		var sumi0, sumi1 int32
		for j := 0; j < 16; j++ {
			sumi0 += int32(x[4+j]&0x0F) * int32(int8(y[4+j]))
			sumi1 += int32(x[4+j]>>4) * int32(int8(y[4+j+16]))
		}
		// C: (dx*dy)*sumi + mx*sy, every product and sum rounded to float.
		dd := float32(f16At(x) * f16At(y))
		sumf += float32(float32(dd*float32(sumi0+sumi1)) + float32(f16At(x[2:])*f16At(y[2:])))
	}
	return sumf
}
