package quant

// Q2_K: 16 sub-blocks of 16 two-bit quants, x = d*sc*q - dmin*m with 4-bit
// sc and m per sub-block. Block: scales[16] (sc low nibble, m high),
// qs[64], d and dmin (fp16).

const (
	q2KBytes   = 84
	q2KQsOff   = 16
	q2KDOff    = 80
	q2KDminOff = 82
)

func init() {
	register(Q2_K, &impl{dequantize: dequantizeQ2K, quantize: quantizeQ2K, vecDot: vecDotQ2K})
}

func dequantizeQ2K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*q2KBytes : (b+1)*q2KBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		d := f16At(blk[q2KDOff:])
		dmin := f16At(blk[q2KDminOff:])
		scales := blk[:16]
		for n := 0; n < 2; n++ { // halves of 128: qs[32n:32n+32]
			q := blk[q2KQsOff+32*n : q2KQsOff+32*n+32]
			for j := 0; j < 4; j++ {
				shift := 2 * j
				for h := 0; h < 2; h++ { // the two 16-element groups of q
					sc := scales[8*n+2*j+h]
					dl := d * float32(sc&0xF)
					ml := float32(dmin * float32(sc>>4))
					out := y[128*n+32*j+16*h:]
					for l := 0; l < 16; l++ {
						out[l] = float32(dl*float32((q[16*h+l]>>shift)&3)) - ml
					}
				}
			}
		}
	}
}

// q2KSearch is quantize_row_q2_K_ref's make_qkx2_quants setting.
var q2KSearch = qkx2Params{nmax: 3, rmin: -0.5, rdelta: 0.1, nstep: 15, useMAD: true}

// quantizeQ2K is quantize_row_q2_K_ref.
func quantizeQ2K(src []float32, dst []byte) {
	var (
		L              [QK_K]uint8
		laux           [16]uint8
		weights        [16]float32
		scales, minsSb [16]float32
	)
	const q4scale = float32(15)
	for b := 0; b < len(src)/QK_K; b++ {
		x := src[b*QK_K : (b+1)*QK_K]
		blk := dst[b*q2KBytes : (b+1)*q2KBytes]
		var maxScale, maxMin float32
		for j := 0; j < 16; j++ {
			xs := x[16*j : 16*j+16]
			for l, v := range xs {
				weights[l] = abs32(v)
			}
			scales[j], minsSb[j] = makeQkx2Quants(q2KSearch, xs, weights[:], L[16*j:16*j+16], laux[:])
			if scales[j] > maxScale {
				maxScale = scales[j]
			}
			if minsSb[j] > maxMin {
				maxMin = minsSb[j]
			}
		}
		sc := blk[:16]
		if maxScale > 0 {
			iscale := q4scale / maxScale
			for j := range sc {
				sc[j] = uint8(nearestInt(float32(iscale * scales[j])))
			}
			putF16(blk[q2KDOff:], maxScale/q4scale)
		} else {
			clear(sc)
			putF16(blk[q2KDOff:], 0)
		}
		if maxMin > 0 {
			iscale := q4scale / maxMin
			for j := range sc {
				sc[j] |= uint8(nearestInt(float32(iscale*minsSb[j])) << 4)
			}
			putF16(blk[q2KDminOff:], maxMin/q4scale)
		} else {
			putF16(blk[q2KDminOff:], 0)
		}
		// Requantize against the rounded scales actually stored.
		d0, m0 := f16At(blk[q2KDOff:]), f16At(blk[q2KDminOff:])
		for j := 0; j < 16; j++ {
			d := d0 * float32(sc[j]&0xF)
			if d == 0 {
				continue
			}
			dm := float32(m0 * float32(sc[j]>>4))
			for i, v := range x[16*j : 16*j+16] {
				L[16*j+i] = uint8(clampInt(nearestInt((v+dm)/d), 0, 3))
			}
		}
		qs := blk[q2KQsOff : q2KQsOff+64]
		for j := 0; j < QK_K; j += 128 {
			for l := 0; l < 32; l++ {
				qs[j/4+l] = L[j+l] | L[j+l+32]<<2 | L[j+l+64]<<4 | L[j+l+96]<<6
			}
		}
	}
}

// vecDotQ2K is ggml_vec_dot_q2_K_q8_K_generic.
func vecDotQ2K(n int, w, a []byte) float32 {
	var sumf float32
	for b := 0; b < n/QK_K; b++ {
		x := w[b*q2KBytes : (b+1)*q2KBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		sc := x[:16]
		var summs int32
		for j := 0; j < 16; j++ {
			summs += y.bsum(j) * int32(sc[j]>>4)
		}
		dall := y.d() * f16At(x[q2KDOff:])
		dmin := y.d() * f16At(x[q2KDminOff:])
		q8 := y.qs()
		var isum int32
		for k := 0; k < 2; k++ {
			q2 := x[q2KQsOff+32*k : q2KQsOff+32*k+32]
			for j := 0; j < 4; j++ {
				shift := 2 * j
				for h := 0; h < 2; h++ {
					var isuml int32
					for l := 16 * h; l < 16*h+16; l++ {
						isuml += int32(int8(q8[l])) * int32((q2[l]>>shift)&3)
					}
					isum += int32(sc[8*k+2*j+h]&0xF) * isuml
				}
				q8 = q8[32:]
			}
		}
		sumf += float32(dall*float32(isum)) - float32(dmin*float32(summs))
	}
	return sumf
}
