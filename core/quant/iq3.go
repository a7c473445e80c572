package quant

import "encoding/binary"

// The 3-bit grid types. Each group of 4 weights is one entry of a grid of
// 4 magnitudes (iq3xxs_grid, iq3s_grid); signs come per 8 weights.
//
//	iq3_xxs (98 bytes): d fp16 | qs[64] grid indices | 8 uint32, one per 32
//	        weights: four 7-bit sign indices (ksigns_iq2xs) and a 4-bit scale
//	        ls in bits 28-31, weight = d*(ls+0.5)/2 * grid * sign.
//	iq3_s  (110 bytes): d fp16 | qs[64] grid low bits | qh[8] grid high bits
//	        | signs[32] bit masks | scales[4]: two 4-bit ls per 64 weights,
//	        weight = d*(2*ls+1) * grid * sign.
//
// Dequantize is ggml's dequantize_row_iq3_*, the dot products its
// ggml_vec_dot_iq3_*_q8_K_generic.

const (
	iq3XXSBytes = 98
	iq3SBytes   = 110
)

func init() {
	register(IQ3_XXS, &impl{dequantize: dequantizeIQ3XXS, vecDot: vecDotIQ3XXS})
	register(IQ3_S, &impl{dequantize: dequantizeIQ3S, vecDot: vecDotIQ3S})
}

// putGroup4x2 writes the 8 weights of two 4-entry grid values g1, g2 with
// the sign bits of signs.
func putGroup4x2(y []float32, dl float32, g1, g2 uint32, signs uint8) {
	y = y[:8]
	for j := 0; j < 4; j++ {
		y[j] = float32(dl*float32(uint8(g1>>(8*j)))) * signF(signs, j)
		y[j+4] = float32(dl*float32(uint8(g2>>(8*j)))) * signF(signs, j+4)
	}
}

// dotGroup4x2 is sum grid*q8*sign over two 4-entry grid values, in ggml's
// order (it alternates between them).
func dotGroup4x2(q8 []byte, g1, g2 uint32, signs uint8) int32 {
	q8 = q8[:8]
	var s int32
	for j := 0; j < 4; j++ {
		s += int32(uint8(g1>>(8*j))) * int32(int8(q8[j])) * signFlip(signs, j)
		s += int32(uint8(g2>>(8*j))) * int32(int8(q8[j+4])) * signFlip(signs, j+4)
	}
	return s
}

func dequantizeIQ3XXS(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*iq3XXSBytes : (b+1)*iq3XXSBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		d := f16At(blk)
		qs, gas := blk[2:66], blk[66:98]
		for ib := 0; ib < QK_K/32; ib++ {
			aux := binary.LittleEndian.Uint32(gas[4*ib:])
			db := d * (0.5 + float32(aux>>28)) * 0.5
			for l := 0; l < 4; l++ {
				putGroup4x2(y[32*ib+8*l:], db, iq3xxsGrid[qs[8*ib+2*l]], iq3xxsGrid[qs[8*ib+2*l+1]],
					ksignsIq2xs[(aux>>(7*l))&127])
			}
		}
	}
}

func vecDotIQ3XXS(n int, w, a []byte) float32 {
	var sumf float32
	for b := 0; b < n/QK_K; b++ {
		x := w[b*iq3XXSBytes : (b+1)*iq3XXSBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		d := f16At(x) * y.d()
		q8 := y.qs()
		qs, gas := x[2:66], x[66:98]
		var bsum int32
		for ib := 0; ib < QK_K/32; ib++ {
			aux := binary.LittleEndian.Uint32(gas[4*ib:])
			ls := int32(2*(aux>>28) + 1)
			var sumi int32
			for l := 0; l < 4; l++ {
				sumi += dotGroup4x2(q8[32*ib+8*l:], iq3xxsGrid[qs[8*ib+2*l]], iq3xxsGrid[qs[8*ib+2*l+1]],
					ksignsIq2xs[(aux>>(7*l))&127])
			}
			bsum += sumi * ls
		}
		sumf += float32(d * float32(bsum))
	}
	return 0.25 * sumf
}

// iq3SGrids returns the two grid values of group l (0-3) of 32-weight block
// ib: 8-bit indices in qs, the ninth bits in qh[ib].
func iq3SGrids(qs, qh []byte, ib, l int) (uint32, uint32) {
	h := int(qh[ib])
	i1 := int(qs[8*ib+2*l]) | (h<<(8-2*l))&256
	i2 := int(qs[8*ib+2*l+1]) | (h<<(7-2*l))&256
	return iq3sGrid[i1], iq3sGrid[i2]
}

func dequantizeIQ3S(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*iq3SBytes : (b+1)*iq3SBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		d := f16At(blk)
		qs, qh, signs, scales := blk[2:66], blk[66:74], blk[74:106], blk[106:110]
		for ib := 0; ib < QK_K/32; ib++ {
			ls := scales[ib/2] & 0xf
			if ib%2 == 1 {
				ls = scales[ib/2] >> 4
			}
			db := d * float32(1+2*int32(ls))
			for l := 0; l < 4; l++ {
				g1, g2 := iq3SGrids(qs, qh, ib, l)
				putGroup4x2(y[32*ib+8*l:], db, g1, g2, signs[4*ib+l])
			}
		}
	}
}

func vecDotIQ3S(n int, w, a []byte) float32 {
	var sumf float32
	for b := 0; b < n/QK_K; b++ {
		x := w[b*iq3SBytes : (b+1)*iq3SBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		d := f16At(x) * y.d()
		q8 := y.qs()
		qs, qh, signs, scales := x[2:66], x[66:74], x[74:106], x[106:110]
		var bsum int32
		for ib := 0; ib < QK_K/32; ib++ {
			ls := scales[ib/2] & 0xf
			if ib%2 == 1 {
				ls = scales[ib/2] >> 4
			}
			var sumi int32
			for l := 0; l < 4; l++ {
				g1, g2 := iq3SGrids(qs, qh, ib, l)
				sumi += dotGroup4x2(q8[32*ib+8*l:], g1, g2, signs[4*ib+l])
			}
			bsum += sumi * (2*int32(ls) + 1)
		}
		sumf += float32(d * float32(bsum))
	}
	return sumf
}
