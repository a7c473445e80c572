package quant

import "encoding/binary"

// Q5_0 and Q5_1: like Q4_0/Q4_1 with a fifth bit per weight in a 32-bit
// little-endian qh word (bit j for element j, bit j+16 for element j+16).
//
//	q5_0: d fp16 | qh[4] | qs[16]          value = (code-16)*d
//	q5_1: d fp16 | m fp16 | qh[4] | qs[16] value = code*d + m

func init() {
	register(Q5_0, &impl{dequantize: dequantizeQ5_0, quantize: quantizeQ5_0, vecDot: vecDotQ5_0})
	register(Q5_1, &impl{dequantize: dequantizeQ5_1, quantize: quantizeQ5_1, vecDot: vecDotQ5_1})
}

// q5Codes unpacks the 32 five-bit codes of a block from its qh word and
// nibbles.
func q5Codes(qh uint32, qs []byte, codes *[32]int32) {
	for j := 0; j < 16; j++ {
		codes[j] = int32(qs[j]&0x0F) | int32((qh>>j)<<4&0x10)
		codes[j+16] = int32(qs[j]>>4) | int32((qh>>(j+12))&0x10)
	}
}

// q5Pack stores 32 five-bit codes as nibbles plus the qh word.
func q5Pack(codes *[32]uint8, qh, qs []byte) {
	var h uint32
	for j := 0; j < 16; j++ {
		x0, x1 := codes[j], codes[j+16]
		qs[j] = x0&0x0F | (x1&0x0F)<<4
		h |= uint32(x0&0x10) >> 4 << j
		h |= uint32(x1&0x10) >> 4 << (j + 16)
	}
	binary.LittleEndian.PutUint32(qh, h)
}

func dequantizeQ5_0(src []byte, dst []float32) {
	var codes [32]int32
	for i := 0; i < len(dst)/32; i++ {
		b := src[22*i : 22*i+22]
		d := f16At(b)
		q5Codes(binary.LittleEndian.Uint32(b[2:]), b[6:], &codes)
		y := dst[32*i : 32*i+32]
		for j, c := range codes {
			y[j] = float32(c-16) * d
		}
	}
}

func quantizeQ5_0(src []float32, dst []byte) {
	var codes [32]uint8
	for i := 0; i < len(src)/32; i++ {
		x := src[32*i : 32*i+32]
		b := dst[22*i : 22*i+22]
		d := absMaxSigned(x) / -16
		id := reciprocal(d)
		putF16(b, d)
		for j, v := range x {
			codes[j] = uint8(min(31, int(int8(cvtt(float32(v*id)+16.5)))))
		}
		q5Pack(&codes, b[2:6], b[6:22])
	}
}

func vecDotQ5_0(n int, w, a []byte) float32 {
	var sumf float32
	var codes [32]int32
	for ib := 0; ib < n/32; ib++ {
		x := w[22*ib : 22*ib+22]
		y := a[34*ib : 34*ib+34]
		q5Codes(binary.LittleEndian.Uint32(x[2:]), x[6:], &codes)
		var sumi0, sumi1 int32
		for j := 0; j < 16; j++ {
			sumi0 += (codes[j] - 16) * int32(int8(y[2+j]))
			sumi1 += (codes[j+16] - 16) * int32(int8(y[2+j+16]))
		}
		sumf += float32(float32(f16At(x)*f16At(y)) * float32(sumi0+sumi1))
	}
	return sumf
}

func dequantizeQ5_1(src []byte, dst []float32) {
	var codes [32]int32
	for i := 0; i < len(dst)/32; i++ {
		b := src[24*i : 24*i+24]
		d, m := f16At(b), f16At(b[2:])
		q5Codes(binary.LittleEndian.Uint32(b[4:]), b[8:], &codes)
		y := dst[32*i : 32*i+32]
		for j, c := range codes {
			y[j] = float32(float32(c)*d) + m
		}
	}
}

func quantizeQ5_1(src []float32, dst []byte) {
	var codes [32]uint8
	for i := 0; i < len(src)/32; i++ {
		x := src[32*i : 32*i+32]
		b := dst[24*i : 24*i+24]
		lo, hi := minMax(x)
		d := (hi - lo) / 31
		id := reciprocal(d)
		putF16(b, d)
		putF16(b[2:], lo)
		for j, v := range x {
			// No clamp to 31 here, unlike Q4_1: ggml relies on the range.
			codes[j] = uint8(cvtt(float32((v-lo)*id) + 0.5))
		}
		q5Pack(&codes, b[4:8], b[8:24])
	}
}

func vecDotQ5_1(n int, w, a []byte) float32 {
	var sumf float32
	var codes [32]int32
	for ib := 0; ib < n/32; ib++ {
		x := w[24*ib : 24*ib+24]
		y := a[36*ib : 36*ib+36]
		q5Codes(binary.LittleEndian.Uint32(x[4:]), x[8:], &codes)
		var sumi0, sumi1 int32
		for j := 0; j < 16; j++ {
			sumi0 += codes[j] * int32(int8(y[4+j]))
			sumi1 += codes[j+16] * int32(int8(y[4+j+16]))
		}
		dd := float32(f16At(x) * f16At(y))
		sumf += float32(float32(dd*float32(sumi0+sumi1)) + float32(f16At(x[2:])*f16At(y[2:])))
	}
	return sumf
}
