package quant

// Q5_K: Q4_K plus a fifth bit per quant. Block: d, dmin (fp16),
// scales[12], qh[32] (bit k of qh[l] is the high bit of element 32k+l),
// qs[128] (low nibbles, laid out as in Q4_K).

const (
	q5KBytes     = 176
	q5KScalesOff = 4
	q5KQhOff     = 16
	q5KQsOff     = 48
)

func init() {
	register(Q5_K, &impl{dequantize: dequantizeQ5K, quantize: quantizeQ5K, vecDot: vecDotQ5K})
}

// q5KQuants expands the 256 five-bit quants of a block in element order.
func q5KQuants(blk []byte, a *[QK_K]int8) {
	qh := blk[q5KQhOff : q5KQhOff+32]
	for k := 0; k < 4; k++ {
		q := blk[q5KQsOff+32*k : q5KQsOff+32*k+32]
		for l := 0; l < 32; l++ {
			h := qh[l] >> (2 * k)
			a[64*k+l] = int8(q[l]&0xF | (h&1)<<4)
			a[64*k+32+l] = int8(q[l]>>4 | (h>>1&1)<<4)
		}
	}
}

func dequantizeQ5K(src []byte, dst []float32) {
	var a [QK_K]int8
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*q5KBytes : (b+1)*q5KBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		d, dmin := f16At(blk[0:]), f16At(blk[2:])
		scales := blk[q5KScalesOff : q5KScalesOff+12]
		q5KQuants(blk, &a)
		for j := 0; j < 8; j++ {
			sc, m := scaleMinK4(j, scales)
			dj, mj := d*float32(sc), float32(dmin*float32(m))
			for l := 32 * j; l < 32*j+32; l++ {
				y[l] = float32(dj*float32(a[l])) - mj
			}
		}
	}
}

// q5KSearch is quantize_row_q5_K_ref's make_qkx2_quants setting.
var q5KSearch = qkx2Params{nmax: 31, rmin: -0.5, rdelta: 0.1, nstep: 15}

// quantizeQ5K is quantize_row_q5_K_ref.
func quantizeQ5K(src []float32, dst []byte) {
	var L [QK_K]uint8
	for b := 0; b < len(src)/QK_K; b++ {
		blk := dst[b*q5KBytes : (b+1)*q5KBytes]
		quantizeKScaleMin(q5KSearch, src[b*QK_K:(b+1)*QK_K], blk, &L)
		qh := blk[q5KQhOff : q5KQhOff+32]
		clear(qh)
		for k := 0; k < 4; k++ {
			ql := blk[q5KQsOff+32*k : q5KQsOff+32*k+32]
			lo, hi := uint8(1)<<(2*k), uint8(2)<<(2*k)
			for l := 0; l < 32; l++ {
				l1, l2 := L[64*k+l], L[64*k+l+32]
				if l1 > 15 {
					l1 -= 16
					qh[l] |= lo
				}
				if l2 > 15 {
					l2 -= 16
					qh[l] |= hi
				}
				ql[l] = l1 | l2<<4
			}
		}
	}
}

// vecDotQ5K is ggml_vec_dot_q5_K_q8_K_generic.
func vecDotQ5K(n int, w, a []byte) float32 {
	var (
		aux8 [QK_K]int8
		sums [8]float32
		sumf float32
	)
	for b := 0; b < n/QK_K; b++ {
		x := w[b*q5KBytes : (b+1)*q5KBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		q5KQuants(x, &aux8)
		aux32, sumi := kDotLanes(&aux8, x[q5KScalesOff:q5KScalesOff+12], y)
		d := f16At(x[0:]) * y.d()
		for l := range sums {
			sums[l] += float32(d * float32(aux32[l]))
		}
		dmin := f16At(x[2:]) * y.d()
		sumf -= float32(dmin * float32(sumi))
	}
	for _, s := range sums {
		sumf += s
	}
	return sumf
}
