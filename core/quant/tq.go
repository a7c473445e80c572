package quant

import "math"

// TQ1_0 and TQ2_0: ternary weights (-1, 0, +1 times one fp16 scale per
// 256-element super-block), for BitNet b1.58 and TriLM models. Both dot
// against Q8_K activations.
//
//	tq1_0: qs[48] | qh[4] | d fp16   (1.6875 bpw)
//	tq2_0: qs[64] | d fp16           (2.0625 bpw)
//
// TQ2_0 stores each trit plus one as 2 bits: element 128c+32l+m at bits
// 2l..2l+1 of qs[32c+m]. TQ1_0 packs five trits per byte as a base-3
// fixed-point fraction (byte = ceil(t*256/243), t the 5-digit base-3
// number, first trit most significant), so that trit n of byte b is
// ((b*3^n) mod 256)*3 >> 8. qs[0:32] hold elements 32n+m (trit n of byte
// m), qs[32:48] elements 160+16n+m, and qh[j] elements 240+4n+j (four
// trits, shifted up one place so the same reading works).

const (
	tq1Bytes   = 54
	tq1QhOff   = 48
	tq1DOff    = 52
	tq2Bytes   = 66
	tq2DOff    = 64
	tq1QsBytes = 48
)

var pow3 = [6]uint8{1, 3, 9, 27, 81, 243}

func init() {
	register(TQ1_0, &impl{dequantize: dequantizeTQ1, quantize: quantizeTQ1, vecDot: vecDotTQ1})
	register(TQ2_0, &impl{dequantize: dequantizeTQ2, quantize: quantizeTQ2, vecDot: vecDotTQ2})
}

// trit reads trit n of a TQ1_0 byte as 0, 1 or 2.
func trit(b uint8, n int) int32 { return int32(uint16(b*pow3[n]) * 3 >> 8) }

// tq1Trits returns the 256 trits (0..2) of a TQ1_0 block in element order.
func tq1Trits(blk []byte, t *[QK_K]int32) {
	k := 0
	for n := 0; n < 5; n++ {
		for m := 0; m < 32; m++ {
			t[k] = trit(blk[m], n)
			k++
		}
	}
	for n := 0; n < 5; n++ {
		for m := 0; m < 16; m++ {
			t[k] = trit(blk[32+m], n)
			k++
		}
	}
	for n := 0; n < 4; n++ {
		for j := 0; j < 4; j++ {
			t[k] = trit(blk[tq1QhOff+j], n)
			k++
		}
	}
}

func dequantizeTQ1(src []byte, dst []float32) {
	var t [QK_K]int32
	for i := 0; i < len(dst)/QK_K; i++ {
		blk := src[tq1Bytes*i : tq1Bytes*(i+1)]
		d := f16At(blk[tq1DOff:])
		tq1Trits(blk, &t)
		y := dst[QK_K*i : QK_K*(i+1)]
		for j, v := range t {
			y[j] = float32(v-1) * d
		}
	}
}

// lroundf is C's lroundf (glibc, x86-64) narrowed to int as ggml stores it:
// halfway cases away from zero; NaN, infinities and values beyond long's
// range give LONG_MIN, whose low 32 bits are 0.
func lroundf(f float32) int32 {
	r := math.Round(float64(f))
	if !(r > -0x1p63 && r < 0x1p63) {
		return 0
	}
	return int32(int64(r))
}

// tqScale is the shared head of both ternary quantizers: d = max|x|
// (C's MAX macro, so a NaN stays only until a later element replaces it)
// and its reciprocal.
func tqScale(x []float32) (d, id float32) {
	var amax float32
	for _, v := range x {
		if av := abs32(v); !(amax > av) {
			amax = av
		}
	}
	return amax, reciprocal(amax)
}

// tq1Pack folds trits into one byte the way quantize_row_tq1_0_ref does:
// base-3 digits (uint8 wrap-around on the out-of-range codes NaN and
// overflow give), then the ceiling of *256/243.
func tq1Pack(q uint8) uint8 { return uint8((uint16(q)*256 + 242) / 243) }

func quantizeTQ1(src []float32, dst []byte) {
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[QK_K*i : QK_K*(i+1)]
		blk := dst[tq1Bytes*i : tq1Bytes*(i+1)]
		d, id := tqScale(x)
		putF16(blk[tq1DOff:], d)
		code := func(v float32) uint8 { return uint8(lroundf(float32(v*id)) + 1) }
		for m := 0; m < 32; m++ {
			var q uint8
			for n := 0; n < 5; n++ {
				q = q*3 + code(x[m+32*n])
			}
			blk[m] = tq1Pack(q)
		}
		for m := 0; m < 16; m++ {
			var q uint8
			for n := 0; n < 5; n++ {
				q = q*3 + code(x[160+m+16*n])
			}
			blk[32+m] = tq1Pack(q)
		}
		for j := 0; j < 4; j++ {
			var q uint8
			for m := 0; m < 4; m++ {
				q = q*3 + code(x[240+j+4*m])
			}
			blk[tq1QhOff+j] = tq1Pack(q * 3)
		}
	}
}

// vecDotTQ1 is ggml_vec_dot_tq1_0_q8_K_generic.
func vecDotTQ1(n int, w, a []byte) float32 {
	var sumf float32
	var t [QK_K]int32
	for i := 0; i < n/QK_K; i++ {
		x := w[tq1Bytes*i : tq1Bytes*(i+1)]
		y := q8KBlock(a[q8KBytes*i : q8KBytes*(i+1)])
		tq1Trits(x, &t)
		q8 := y.qs()
		var sum int32
		for j, v := range t {
			sum += (v - 1) * int32(int8(q8[j]))
		}
		sumf += float32(float32(sum) * float32(f16At(x[tq1DOff:])*y.d()))
	}
	return sumf
}

func dequantizeTQ2(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		blk := src[tq2Bytes*i : tq2Bytes*(i+1)]
		d := f16At(blk[tq2DOff:])
		y := dst[QK_K*i : QK_K*(i+1)]
		for c := 0; c < 2; c++ {
			for l := 0; l < 4; l++ {
				for m := 0; m < 32; m++ {
					y[128*c+32*l+m] = float32(int32(blk[32*c+m]>>(2*l)&3)-1) * d
				}
			}
		}
	}
}

func quantizeTQ2(src []float32, dst []byte) {
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[QK_K*i : QK_K*(i+1)]
		blk := dst[tq2Bytes*i : tq2Bytes*(i+1)]
		d, id := tqScale(x)
		putF16(blk[tq2DOff:], d)
		for c := 0; c < 2; c++ {
			for m := 0; m < 32; m++ {
				var q uint8
				for l := 0; l < 4; l++ {
					xi := lroundf(float32(x[128*c+32*l+m]*id)) + 1
					q += uint8(xi&3) << (2 * l)
				}
				blk[32*c+m] = q
			}
		}
	}
}

// vecDotTQ2 is ggml_vec_dot_tq2_0_q8_K_generic.
func vecDotTQ2(n int, w, a []byte) float32 {
	var sumf float32
	for i := 0; i < n/QK_K; i++ {
		x := w[tq2Bytes*i : tq2Bytes*(i+1)]
		y := q8KBlock(a[q8KBytes*i : q8KBytes*(i+1)])
		q8 := y.qs()
		var sumi int32
		for c := 0; c < 2; c++ {
			for l := 0; l < 4; l++ {
				for m := 0; m < 32; m++ {
					sumi += int32(int8(q8[128*c+32*l+m])) * (int32(x[32*c+m]>>(2*l)&3) - 1)
				}
			}
		}
		d := y.d() * f16At(x[tq2DOff:])
		sumf += float32(float32(sumi) * d)
	}
	return sumf
}
