package quant

// Q4_K: 8 sub-blocks of 32 four-bit quants, x = d*sc*q - dmin*m with 6-bit
// sc and m per sub-block. Block: d, dmin (fp16), scales[12] (packed as
// scaleMinK4 reads them), qs[128] (sub-blocks 2k and 2k+1 share qs[32k:],
// low and high nibble).

const (
	q4KBytes     = 144
	q4KScalesOff = 4
	q4KQsOff     = 16
)

func init() {
	register(Q4_K, &impl{dequantize: dequantizeQ4K, quantize: quantizeQ4K, vecDot: vecDotQ4K})
}

func dequantizeQ4K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*q4KBytes : (b+1)*q4KBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		d, dmin := f16At(blk[0:]), f16At(blk[2:])
		scales := blk[q4KScalesOff : q4KScalesOff+12]
		for k := 0; k < 4; k++ {
			q := blk[q4KQsOff+32*k : q4KQsOff+32*k+32]
			sc, m := scaleMinK4(2*k, scales)
			d1, m1 := d*float32(sc), float32(dmin*float32(m))
			sc, m = scaleMinK4(2*k+1, scales)
			d2, m2 := d*float32(sc), float32(dmin*float32(m))
			out := y[64*k : 64*k+64]
			for l := 0; l < 32; l++ {
				out[l] = float32(d1*float32(q[l]&0xF)) - m1
				out[32+l] = float32(d2*float32(q[l]>>4)) - m2
			}
		}
	}
}

// q4KSearch is quantize_row_q4_K_ref's make_qkx2_quants setting.
var q4KSearch = qkx2Params{nmax: 15, rmin: -1, rdelta: 0.1, nstep: 20}

// kQuantWeights are the weights quantize_row_q4_K_ref and _q5_K_ref give
// make_qkx2_quants: the group's RMS plus each element's magnitude.
func kQuantWeights(x, weights []float32) {
	var sumX2 float32
	for _, v := range x {
		sumX2 += float32(v * v)
	}
	avX := sqrt32(sumX2 / float32(len(x)))
	for l, v := range x {
		weights[l] = avX + abs32(v)
	}
}

// quantizeKScaleMin fits each 32-element sub-block with makeQkx2Quants,
// stores the 6-bit scales and mins, d and dmin of a Q4_K or Q5_K block (its
// first 16 bytes), then requantizes every element against the stored,
// rounded scales into L in [0, p.nmax]. It is the part of
// quantize_row_q4_K_ref and quantize_row_q5_K_ref that the two share.
func quantizeKScaleMin(p qkx2Params, x []float32, blk []byte, L *[QK_K]uint8) {
	var (
		laux             [32]uint8
		weights          [32]float32
		scales, minsSub  [8]float32
		maxScale, maxMin float32
	)
	for j := 0; j < 8; j++ {
		xs := x[32*j : 32*j+32]
		kQuantWeights(xs, weights[:])
		scales[j], minsSub[j] = makeQkx2Quants(p, xs, weights[:], L[32*j:32*j+32], laux[:])
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if minsSub[j] > maxMin {
			maxMin = minsSub[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	var ls8, lm8 [8]uint8
	for j := 0; j < 8; j++ {
		// C keeps nearest_int's result in a uint8_t before taking the min.
		ls8[j] = min(63, uint8(nearestInt(float32(invScale*scales[j]))))
		lm8[j] = min(63, uint8(nearestInt(float32(invMin*minsSub[j]))))
	}
	packed := blk[4:16]
	putScaleMinK4(packed, &ls8, &lm8)
	putF16(blk[0:], maxScale/63)
	putF16(blk[2:], maxMin/63)

	d0, m0 := f16At(blk[0:]), f16At(blk[2:])
	for j := 0; j < 8; j++ {
		sc, m := scaleMinK4(j, packed)
		d := d0 * float32(sc)
		if d == 0 {
			continue
		}
		dm := float32(m0 * float32(m))
		for i, v := range x[32*j : 32*j+32] {
			L[32*j+i] = uint8(clampInt(nearestInt((v+dm)/d), 0, p.nmax))
		}
	}
}

// quantizeQ4K is quantize_row_q4_K_ref.
func quantizeQ4K(src []float32, dst []byte) {
	var L [QK_K]uint8
	for b := 0; b < len(src)/QK_K; b++ {
		blk := dst[b*q4KBytes : (b+1)*q4KBytes]
		quantizeKScaleMin(q4KSearch, src[b*QK_K:(b+1)*QK_K], blk, &L)
		qs := blk[q4KQsOff : q4KQsOff+128]
		for k := 0; k < 4; k++ {
			for l := 0; l < 32; l++ {
				qs[32*k+l] = L[64*k+l] | L[64*k+l+32]<<4
			}
		}
	}
}

// kDotLanes is the tail shared by the generic Q4_K, Q5_K dot products: the
// quants in aux8 (element order) times q8, summed per 32-element sub-block
// scale into eight integer lanes (element index mod 8), and the sum of the
// activation block sums times the sub-block mins.
func kDotLanes(aux8 *[QK_K]int8, scales []byte, y q8KBlock) (aux32 [8]int32, sumi int32) {
	var sc, m [8]uint8
	for j := 0; j < 8; j++ {
		sc[j], m[j] = scaleMinK4(j, scales)
	}
	for j := 0; j < 16; j++ {
		sumi += y.bsum(j) * int32(m[j/2])
	}
	q8 := y.qs()
	for j := 0; j < 8; j++ {
		scale := int32(sc[j])
		for l := 32 * j; l < 32*j+32; l++ {
			aux32[l%8] += scale * int32(int16(int32(int8(q8[l]))*int32(aux8[l])))
		}
	}
	return aux32, sumi
}

// vecDotQ4K is ggml_vec_dot_q4_K_q8_K_generic.
func vecDotQ4K(n int, w, a []byte) float32 {
	var (
		aux8 [QK_K]int8
		sums [8]float32
		sumf float32
	)
	for b := 0; b < n/QK_K; b++ {
		x := w[b*q4KBytes : (b+1)*q4KBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		for k := 0; k < 4; k++ {
			q := x[q4KQsOff+32*k : q4KQsOff+32*k+32]
			for l := 0; l < 32; l++ {
				aux8[64*k+l] = int8(q[l] & 0xF)
				aux8[64*k+32+l] = int8(q[l] >> 4)
			}
		}
		aux32, sumi := kDotLanes(&aux8, x[q4KScalesOff:q4KScalesOff+12], y)
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
