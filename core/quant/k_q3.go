package quant

import "encoding/binary"

// Q3_K: 16 sub-blocks of 16 three-bit quants, x = d*(sc-32)*(q-4) with a
// 6-bit sc per sub-block. Block: hmask[32] (the third bit), qs[64] (the low
// two bits), scales[12] (16 packed 6-bit scales), d (fp16).

const (
	q3KBytes     = 110
	q3KQsOff     = 32
	q3KScalesOff = 96
	q3KDOff      = 108
)

func init() {
	register(Q3_K, &impl{dequantize: dequantizeQ3K, quantize: quantizeQ3K, vecDot: vecDotQ3K})
}

// q3KScales unpacks the 16 six-bit scales (still biased by 32), as the
// kmask shuffle in dequantize_row_q3_K does.
func q3KScales(packed []byte) (s [16]int8) {
	const kmask1, kmask2 = 0x03030303, 0x0f0f0f0f
	a0 := binary.LittleEndian.Uint32(packed[0:])
	a1 := binary.LittleEndian.Uint32(packed[4:])
	tmp := binary.LittleEndian.Uint32(packed[8:])
	aux := [4]uint32{
		(a0 & kmask2) | (((tmp >> 0) & kmask1) << 4),
		(a1 & kmask2) | (((tmp >> 2) & kmask1) << 4),
		((a0 >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4),
		((a1 >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4),
	}
	for i, v := range aux {
		for k := 0; k < 4; k++ {
			s[4*i+k] = int8(v >> (8 * k))
		}
	}
	return s
}

// q3KQuants expands the 256 quants of a block to q-4 in [-4, 3], the
// element order of dequantize_row_q3_K.
func q3KQuants(blk []byte, a *[QK_K]int8) {
	hm := blk[:32]
	for n := 0; n < 2; n++ {
		q := blk[q3KQsOff+32*n : q3KQsOff+32*n+32]
		for j := 0; j < 4; j++ {
			out := a[128*n+32*j : 128*n+32*j+32]
			bit := 4*n + j // hmask bit of this 32-element run
			for l := range out {
				// Branch-free: the high bit is random, a branch mispredicts.
				out[l] = int8((q[l]>>(2*j))&3) - 4 + 4*int8((hm[l]>>bit)&1)
			}
		}
	}
}

func dequantizeQ3K(src []byte, dst []float32) {
	var a [QK_K]int8
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*q3KBytes : (b+1)*q3KBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		dAll := f16At(blk[q3KDOff:])
		sc := q3KScales(blk[q3KScalesOff:])
		q3KQuants(blk, &a)
		// Element 16*s+l belongs to sub-block s (scales[is++] in C's order).
		for s := 0; s < 16; s++ {
			dl := dAll * float32(int32(sc[s])-32)
			for l := 16 * s; l < 16*s+16; l++ {
				y[l] = dl * float32(a[l])
			}
		}
	}
}

// quantizeQ3K is quantize_row_q3_K_ref.
func quantizeQ3K(src []float32, dst []byte) {
	var (
		L      [QK_K]int8
		scales [16]float32
	)
	for b := 0; b < len(src)/QK_K; b++ {
		x := src[b*QK_K : (b+1)*QK_K]
		blk := dst[b*q3KBytes : (b+1)*q3KBytes]
		var maxScale, amax float32
		for j := 0; j < 16; j++ {
			scales[j] = makeQ3Quants(4, x[16*j:16*j+16], L[16*j:16*j+16])
			if s := abs32(scales[j]); s > amax {
				amax, maxScale = s, scales[j]
			}
		}
		ps := blk[q3KScalesOff : q3KScalesOff+12]
		clear(ps)
		if maxScale != 0 {
			iscale := -32 / maxScale
			for j := 0; j < 16; j++ {
				// C stores nearest_int's result in an int8 before clamping.
				l := int8(nearestInt(float32(iscale * scales[j])))
				l = int8(clampInt(int(l), -32, 31) + 32)
				if j < 8 {
					ps[j] = uint8(l) & 0xF
				} else {
					ps[j-8] |= (uint8(l) & 0xF) << 4
				}
				ps[j%4+8] |= uint8(l>>4) << (2 * (j / 4))
			}
			putF16(blk[q3KDOff:], 1/iscale)
		} else {
			putF16(blk[q3KDOff:], 0)
		}
		d0 := f16At(blk[q3KDOff:])
		for j := 0; j < 16; j++ {
			var sc uint8
			if j < 8 {
				sc = ps[j] & 0xF
			} else {
				sc = ps[j-8] >> 4
			}
			sc |= ((ps[8+j%4] >> (2 * (j / 4))) & 3) << 4
			d := d0 * float32(int32(int8(sc))-32)
			if d == 0 {
				continue
			}
			for i, v := range x[16*j : 16*j+16] {
				L[16*j+i] = int8(clampInt(nearestInt(v/d), -4, 3) + 4)
			}
		}
		packQ3K(blk, &L)
	}
}

// packQ3K stores quants L in [0, 7]: the third bit into hmask (bit k of
// hmask[m] for element 32k+m), the low two bits into qs.
func packQ3K(blk []byte, L *[QK_K]int8) {
	hmask := blk[:32]
	clear(hmask)
	for j := range L {
		if L[j] > 3 {
			hmask[j%32] |= 1 << (j / 32)
			L[j] -= 4
		}
	}
	qs := blk[q3KQsOff : q3KQsOff+64]
	for j := 0; j < QK_K; j += 128 {
		for l := 0; l < 32; l++ {
			qs[j/4+l] = uint8(L[j+l]) | uint8(L[j+l+32])<<2 | uint8(L[j+l+64])<<4 | uint8(L[j+l+96])<<6
		}
	}
}

// vecDotQ3K is ggml_vec_dot_q3_K_q8_K_generic: integer sums in eight lanes
// (element index mod 8), scaled per block into eight float lanes that are
// added up only at the end.
func vecDotQ3K(n int, w, a []byte) float32 {
	var (
		aux8 [QK_K]int8
		sums [8]float32
	)
	for b := 0; b < n/QK_K; b++ {
		x := w[b*q3KBytes : (b+1)*q3KBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		q3KQuants(x, &aux8)
		sc := q3KScales(x[q3KScalesOff:])
		q8 := y.qs()
		var aux32 [8]int32
		for j := 0; j < 16; j++ {
			scale := int32(sc[j]) - 32
			for l := 16 * j; l < 16*j+16; l++ {
				aux32[l%8] += scale * int32(int16(int32(int8(q8[l]))*int32(aux8[l])))
			}
		}
		d := f16At(x[q3KDOff:]) * y.d()
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
