package quant

// Q8_0 and Q8_1: blocks of 32 signed bytes with a half-precision scale.
//
//	q8_0: d fp16 | qs[32]          value = q*d
//	q8_1: d fp16 | s fp16 | qs[32] s = d*sum(q), used by Q4_1/Q5_1 dot products
//
// Both are also the activation formats of the 32-element block types. The CPU
// backend's scalar quantize_row_q8_0/q8_1 call the _ref functions, so
// quantize here is the activation quantizer as well. ggml has no to_float and
// no vec_dot for Q8_1; neither does k3.

func init() {
	register(Q8_0, &impl{dequantize: dequantizeQ8_0, quantize: quantizeQ8_0, vecDot: vecDotQ8_0})
	register(Q8_1, &impl{quantize: quantizeQ8_1})
}

func dequantizeQ8_0(src []byte, dst []float32) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[34*i : 34*i+34]
		d := f16At(b)
		y := dst[32*i : 32*i+32]
		for j := range y {
			y[j] = float32(int8(b[2+j])) * d
		}
	}
}

// absMax is ggml's MAX(amax, fabsf(v)) loop.
func absMax(x []float32) float32 {
	var amax float32
	for _, v := range x {
		// MAX(a, b) is ((a) > (b) ? (a) : (b)), so a NaN does replace amax.
		if a := abs32(v); !(amax > a) {
			amax = a
		}
	}
	return amax
}

// q8Block quantizes 32 values with scale amax/127 into qs and returns the
// unrounded scale d.
func q8Block(x []float32, qs []byte) float32 {
	d := absMax(x) / 127
	id := reciprocal(d)
	for j, v := range x {
		qs[j] = uint8(int8(cvtt(roundf(v * id))))
	}
	return d
}

func quantizeQ8_0(src []float32, dst []byte) {
	for i := 0; i < len(src)/32; i++ {
		b := dst[34*i : 34*i+34]
		putF16(b, q8Block(src[32*i:32*i+32], b[2:]))
	}
}

func quantizeQ8_1(src []float32, dst []byte) {
	for i := 0; i < len(src)/32; i++ {
		b := dst[36*i : 36*i+36]
		d := q8Block(src[32*i:32*i+32], b[4:])
		var sum int32
		for _, q := range b[4:36] {
			sum += int32(int8(q))
		}
		putF16(b, d)
		putF16(b[2:], float32(sum)*d)
	}
}

func vecDotQ8_0(n int, w, a []byte) float32 {
	var sumf float32
	for ib := 0; ib < n/32; ib++ {
		x := w[34*ib : 34*ib+34]
		y := a[34*ib : 34*ib+34]
		var sumi int32
		for j := 2; j < 34; j++ {
			sumi += int32(int8(x[j])) * int32(int8(y[j]))
		}
		sumf += float32(float32(sumi) * float32(f16At(x)*f16At(y)))
	}
	return sumf
}
