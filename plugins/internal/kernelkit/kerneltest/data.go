package kerneltest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/k3-inference/k3/core/quant"
)

// kernelTypes are the weight types with a SIMD kernel in some level.
var kernelTypes = []quant.Type{quant.Q2_K, quant.Q3_K, quant.Q6_K, quant.Q4_K, quant.Q5_K, quant.Q8_0, quant.Q4_0,
	quant.Q5_0, quant.MXFP4, quant.F32, quant.F16, quant.BF16, quant.IQ4_NL, quant.IQ4_XS,
	quant.Q4_1, quant.Q5_1, quant.TQ1_0, quant.TQ2_0,
	quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S,
	quant.IQ3_XXS, quant.IQ1_S, quant.IQ1_M, quant.IQ3_S}

// randHalf returns a finite fp16 of random sign with magnitude in
// [2^lo, 2^hi).
func randHalf(r *rand.Rand, lo, hi float64) uint16 {
	e := lo + r.Float64()*(hi-lo)
	v := float32(math.Pow(2, e))
	if r.IntN(2) == 0 {
		v = -v
	}
	return quant.FP32ToFP16(v)
}

// halfFields are the byte offsets of each block type's fp16 scales.
var halfFields = map[quant.Type][]int{
	quant.Q2_K: {80, 82}, quant.Q3_K: {108}, quant.Q4_K: {0, 2}, quant.Q5_K: {0, 2},
	quant.Q6_K: {208}, quant.Q8_0: {0}, quant.Q4_0: {0}, quant.Q5_0: {0},
	quant.IQ4_NL: {0}, quant.IQ4_XS: {0}, quant.Q4_1: {0, 2}, quant.Q5_1: {0, 2},
	quant.TQ1_0: {52}, quant.TQ2_0: {64},
	quant.IQ2_XXS: {0}, quant.IQ2_XS: {0}, quant.IQ2_S: {0},
	quant.IQ3_XXS: {0}, quant.IQ3_S: {0}, quant.IQ1_S: {0},
}

// quantRanges are the byte ranges of each block type's quant bits: zeroing
// them leaves only the block's offset/minimum part.
var quantRanges = map[quant.Type][][2]int{
	quant.Q2_K: {{16, 80}}, quant.Q3_K: {{0, 96}}, quant.Q4_K: {{16, 144}}, quant.Q5_K: {{16, 176}},
	quant.Q6_K: {{0, 192}}, quant.Q8_0: {{2, 34}}, quant.Q4_0: {{2, 18}},
	quant.Q5_0: {{2, 22}}, quant.MXFP4: {{1, 17}}, quant.Q4_1: {{4, 20}}, quant.Q5_1: {{4, 24}},
}

// randWeights fills a row of n elements of t with random bytes and sane
// scales.
func randWeights(r *rand.Rand, t quant.Type, n int) []byte {
	size, _ := quant.RowSize(t, int64(n))
	w := make([]byte, size)
	switch t {
	case quant.F32:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(float32(r.NormFloat64())))
		}
		return w
	case quant.F16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(w[2*i:], randHalf(r, -8, 4))
		}
		return w
	case quant.BF16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(w[2*i:], quant.FP32ToBF16(float32(r.NormFloat64())))
		}
		return w
	}
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	bs := t.TypeSize()
	for b := 0; b < len(w)/bs; b++ {
		for _, off := range halfFields[t] {
			binary.LittleEndian.PutUint16(w[b*bs+off:], randHalf(r, -16, 0))
		}
		if t == quant.MXFP4 {
			w[b*bs] = byte(100 + r.IntN(50)) // 2^-28 .. 2^21: finite products
		}
		if t == quant.IQ1_M {
			setIQ1MScale(w[b*bs:], randHalf(r, -16, 0))
		}
	}
	return w
}

// makeQ8K builds a valid Q8_K block (bsums consistent with qs).
func makeQ8K(dst []byte, d float32, qs []int8) {
	binary.LittleEndian.PutUint32(dst, math.Float32bits(d))
	for i, q := range qs {
		dst[4+i] = byte(q)
	}
	for j := 0; j < 16; j++ {
		var s int16
		for _, q := range qs[16*j : 16*j+16] {
			s += int16(q)
		}
		binary.LittleEndian.PutUint16(dst[260+2*j:], uint16(s))
	}
}

// randActs returns a valid activation row of n elements for weight type t,
// with every byte value (including -128) among the quants.
func randActs(r *rand.Rand, t quant.Type, n int) []byte {
	vt := t.VecDotType()
	switch vt {
	case quant.F32, quant.F16, quant.BF16:
		return randWeights(r, vt, n)
	}
	size, _ := quant.RowSize(vt, int64(n))
	a := make([]byte, size)
	var qs [256]int8
	switch vt {
	case quant.Q8_K:
		for b := 0; b < n/256; b++ {
			for i := range qs {
				qs[i] = int8(r.Uint32())
			}
			d := float32(math.Pow(2, -10*r.Float64())) * float32(1-2*r.IntN(2))
			makeQ8K(a[292*b:], d, qs[:])
		}
	case quant.Q8_0:
		for i := range a {
			a[i] = byte(r.Uint32())
		}
		for b := 0; b < n/32; b++ {
			binary.LittleEndian.PutUint16(a[34*b:], randHalf(r, -10, 0))
		}
		noMinus128(t, a)
	case quant.Q8_1:
		for i := range a {
			a[i] = byte(r.Uint32())
		}
		for b := 0; b < n/32; b++ {
			binary.LittleEndian.PutUint16(a[36*b:], randHalf(r, -10, 0))
			binary.LittleEndian.PutUint16(a[36*b+2:], randHalf(r, -6, 4))
		}
	}
	return a
}

// noMinus128 applies the Q8_0 kernels' precondition to a Q8_0 activation
// row: no quant is -128 (QuantizeActivation never produces one, and the
// sign trick of the Q8_0·Q8_0 kernel relies on it). Other weight types take
// any byte.
func noMinus128(t quant.Type, a []byte) {
	if t != quant.Q8_0 {
		return
	}
	for b := 0; b < len(a)/34; b++ {
		for i := 34*b + 2; i < 34*b+34; i++ {
			if a[i] == 0x80 {
				a[i] = 0x81
			}
		}
	}
}

// magnitude bounds the sum of |terms| a kernel adds for w·a: the sum of
// (|w_i| + |o_i|)·|a_i|, with o the block's offset or minimum part (the
// dequantized block with its quant bits cleared). Every SIMD kernel's
// partial sums are bounded by it, so float differences are measured
// against it rather than against a cancelling result.
func magnitude(t quant.Type, n int, w, a []byte) float64 {
	wd := make([]float32, n)
	od := make([]float32, n)
	ad := make([]float32, n)
	mustDeq(t, w, wd)
	if t.VecDotType() == quant.Q8_1 {
		deqQ8_1(a, ad)
	} else {
		mustDeq(t.VecDotType(), a, ad)
	}
	if rs := quantRanges[t]; rs != nil {
		o := append([]byte(nil), w...)
		bs := t.TypeSize()
		for b := 0; b < len(o)/bs; b++ {
			for _, rg := range rs {
				clear(o[b*bs+rg[0] : b*bs+rg[1]])
			}
		}
		mustDeq(t, o, od)
	}
	var m float64
	for i := range wd {
		m += (math.Abs(float64(wd[i])) + math.Abs(float64(od[i]))) * math.Abs(float64(ad[i]))
	}
	return m
}

// deqQ8_1 decodes a Q8_1 row as d*q; core/quant has no Q8_1 dequantize
// (ggml has none either).
func deqQ8_1(a []byte, dst []float32) {
	for b := 0; b < len(dst)/32; b++ {
		d := quant.FP16ToFP32(binary.LittleEndian.Uint16(a[36*b:]))
		for i := 0; i < 32; i++ {
			dst[32*b+i] = d * float32(int8(a[36*b+4+i]))
		}
	}
}

func mustDeq(t quant.Type, src []byte, dst []float32) {
	if err := quant.Dequantize(t, src, dst); err != nil {
		panic(err)
	}
}

// q8KInputs are activation rows that stress the Q8_K quantizer: ties in
// the rounding, signed maxima, repeated maxima of both signs, zeros, NaN,
// infinities, subnormals, huge values.
func q8KInputs(r *rand.Rand) map[string][]float32 {
	row := func(f func(i int) float32) []float32 {
		x := make([]float32, 256*4)
		for i := range x {
			x[i] = f(i)
		}
		return x
	}
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	return map[string][]float32{
		"normal":     row(func(int) float32 { return float32(r.NormFloat64()) }),
		"ties":       row(func(i int) float32 { return float32(i%255-127) + 0.5 }),
		"zeros":      row(func(int) float32 { return 0 }),
		"neg-zero":   row(func(int) float32 { return float32(math.Copysign(0, -1)) }),
		"both-signs": row(func(i int) float32 { return float32(1 - 2*(i%2)) }),
		"negmax":     row(func(i int) float32 { return -float32(i % 256) }),
		"nan":        row(func(i int) float32 { return [3]float32{nan, 1, -2}[i%3] }),
		"all-nan":    row(func(int) float32 { return nan }),
		"inf":        row(func(i int) float32 { return [3]float32{inf, 1, -inf}[i%3] }),
		"subnormal":  row(func(i int) float32 { return math.Float32frombits(uint32(i%64)) * float32(1-2*(i%2)) }),
		"tiny-max":   row(func(i int) float32 { return math.Float32frombits(uint32(1 + i%3)) }),
		"huge":       row(func(i int) float32 { return float32(r.NormFloat64()) * 3e38 }),
		"wide":       row(func(int) float32 { return float32(r.NormFloat64() * math.Pow(10, 30*r.Float64()-15)) }),
	}
}

// setIQ1MScale stores IQ1_M's fp16 d in the top nibbles of the block's
// four scale words (bytes 48-55).
func setIQ1MScale(blk []byte, d uint16) {
	for i := 0; i < 4; i++ {
		o := 48 + 2*i
		v := binary.LittleEndian.Uint16(blk[o:])&0x0fff | (d>>(4*i)&0xf)<<12
		binary.LittleEndian.PutUint16(blk[o:], v)
	}
}
