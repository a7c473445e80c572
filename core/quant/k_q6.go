package quant

// Q6_K: 16 sub-blocks of 16 six-bit quants, x = d*sc*(q-32) with an int8
// sc per sub-block. Block: ql[128] (low nibbles), qh[64] (high two bits),
// scales[16] (int8), d (fp16). Each 128-element half uses ql[64h:64h+64]
// and qh[32h:32h+32]; element 32k+l of a half takes ql[l+32(k&1)]'s
// nibble k>>1 and bits 2k..2k+1 of qh[l].

const (
	q6KBytes     = 210
	q6KQhOff     = 128
	q6KScalesOff = 192
	q6KDOff      = 208
)

func init() {
	register(Q6_K, &impl{dequantize: dequantizeQ6K, quantize: quantizeQ6K, vecDot: vecDotQ6K})
}

// q6KQuants expands the 256 quants of a block to q-32 in element order.
func q6KQuants(blk []byte, a *[QK_K]int8) {
	for h := 0; h < 2; h++ {
		ql := blk[64*h : 64*h+64]
		qh := blk[q6KQhOff+32*h : q6KQhOff+32*h+32]
		out := a[128*h : 128*h+128]
		for l := 0; l < 32; l++ {
			out[l] = int8((ql[l]&0xF)|((qh[l]>>0)&3)<<4) - 32
			out[l+32] = int8((ql[l+32]&0xF)|((qh[l]>>2)&3)<<4) - 32
			out[l+64] = int8((ql[l]>>4)|((qh[l]>>4)&3)<<4) - 32
			out[l+96] = int8((ql[l+32]>>4)|((qh[l]>>6)&3)<<4) - 32
		}
	}
}

func dequantizeQ6K(src []byte, dst []float32) {
	var a [QK_K]int8
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*q6KBytes : (b+1)*q6KBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		d := f16At(blk[q6KDOff:])
		q6KQuants(blk, &a)
		for s := 0; s < 16; s++ {
			ds := d * float32(int8(blk[q6KScalesOff+s]))
			for l := 16 * s; l < 16*s+16; l++ {
				y[l] = ds * float32(a[l])
			}
		}
	}
}

// quantizeQ6K is quantize_row_q6_K_ref.
func quantizeQ6K(src []float32, dst []byte) {
	var (
		L      [QK_K]int8
		scales [16]float32
	)
	for b := 0; b < len(src)/QK_K; b++ {
		x := src[b*QK_K : (b+1)*QK_K]
		blk := dst[b*q6KBytes : (b+1)*q6KBytes]
		var maxScale, maxAbsScale float32
		for ib := 0; ib < 16; ib++ {
			scales[ib] = makeQxQuants(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
			if s := abs32(scales[ib]); s > maxAbsScale {
				maxAbsScale, maxScale = s, scales[ib]
			}
		}
		if maxAbsScale < groupMaxEps {
			clear(blk)
			continue
		}
		iscale := -128 / maxScale
		putF16(blk[q6KDOff:], 1/iscale)
		sc := blk[q6KScalesOff : q6KScalesOff+16]
		for ib := range sc {
			sc[ib] = byte(int8(min(127, nearestInt(float32(iscale*scales[ib])))))
		}
		d0 := f16At(blk[q6KDOff:])
		for j := 0; j < 16; j++ {
			d := d0 * float32(int8(sc[j]))
			if d == 0 {
				continue
			}
			for i, v := range x[16*j : 16*j+16] {
				L[16*j+i] = int8(clampInt(nearestInt(v/d), -32, 31) + 32)
			}
		}
		packQ6K(blk, &L)
	}
}

// packQ6K stores quants L in [0, 63], the inverse of q6KQuants.
func packQ6K(blk []byte, L *[QK_K]int8) {
	for h := 0; h < 2; h++ {
		ql := blk[64*h : 64*h+64]
		qh := blk[q6KQhOff+32*h : q6KQhOff+32*h+32]
		x := L[128*h : 128*h+128]
		for l := 0; l < 32; l++ {
			q1, q2, q3, q4 := uint8(x[l]), uint8(x[l+32]), uint8(x[l+64]), uint8(x[l+96])
			ql[l] = q1&0xF | (q3&0xF)<<4
			ql[l+32] = q2&0xF | (q4&0xF)<<4
			qh[l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
		}
	}
}

// vecDotQ6K is ggml_vec_dot_q6_K_q8_K_generic.
func vecDotQ6K(n int, w, a []byte) float32 {
	var (
		aux8 [QK_K]int8
		sums [8]float32
	)
	for b := 0; b < n/QK_K; b++ {
		x := w[b*q6KBytes : (b+1)*q6KBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		q6KQuants(x, &aux8)
		q8 := y.qs()
		var aux32 [8]int32
		for j := 0; j < 16; j++ {
			scale := int32(int8(x[q6KScalesOff+j]))
			for l := 16 * j; l < 16*j+16; l++ {
				aux32[l%8] += scale * int32(int16(int32(int8(q8[l]))*int32(aux8[l])))
			}
		}
		d := f16At(x[q6KDOff:]) * y.d()
		for l := range sums {
			sums[l] += float32(d * float32(aux32[l]))
		}
	}
	var sumf float32
	for _, s := range sums {
		sumf += s
	}
	return sumf
}
