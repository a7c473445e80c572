package quant

import "encoding/binary"

// The 2-bit grid types. Each group of 8 weights is one entry of a grid of
// 8 magnitudes (iq2xxs/iq2xs/iq2s_grid) plus 8 sign bits; each 32 weights
// have a 4-bit scale ls, applied as d*(ls+0.5)/4 (dot products: 2*ls+1
// times d/8).
//
//	iq2_xxs (66 bytes): d fp16 | qs[64]: per 32 weights, 4 grid bytes then
//	        a uint32 of four 7-bit sign indices (ksigns_iq2xs) and ls in bits 28-31.
//	iq2_xs  (74 bytes): d fp16 | qs uint16[32]: 9-bit grid index, 7-bit sign
//	        index | scales[8]: two 4-bit ls per 32 weights (one per 16).
//	iq2_s   (82 bytes): d fp16 | qs[32] grid low bits | signs[32] (plain
//	        bit masks) | qh[8]: 2 high grid bits per group | scales[8] as iq2_xs.
//
// Dequantize is ggml's dequantize_row_iq2_*, the dot products its
// ggml_vec_dot_iq2_*_q8_K_generic.

const (
	iq2XXSBytes = 66
	iq2XSBytes  = 74
	iq2SBytes   = 82
)

func init() {
	register(IQ2_XXS, &impl{dequantize: dequantizeIQ2XXS, vecDot: vecDotIQ2XXS})
	register(IQ2_XS, &impl{dequantize: dequantizeIQ2XS, vecDot: vecDotIQ2XS})
	register(IQ2_S, &impl{dequantize: dequantizeIQ2S, vecDot: vecDotIQ2S})
}

// putGroup8 writes dl*grid[j]*sign for the 8 weights of one grid entry.
func putGroup8(y []float32, dl float32, g uint64, signs uint8) {
	y = y[:8]
	for j := range y {
		y[j] = float32(dl*float32(gridByte(g, j))) * signF(signs, j)
	}
}

// dotGroup8 is sum grid[j]*q8[j]*sign over one grid entry.
func dotGroup8(q8 []byte, g uint64, signs uint8) int32 {
	q8 = q8[:8]
	var s int32
	for j := range q8 {
		s += int32(gridByte(g, j)) * int32(int8(q8[j])) * signFlip(signs, j)
	}
	return s
}

func dequantizeIQ2XXS(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*iq2XXSBytes : (b+1)*iq2XXSBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		d := f16At(blk)
		for ib := 0; ib < QK_K/32; ib++ {
			q := blk[2+8*ib : 2+8*ib+8]
			aux1 := binary.LittleEndian.Uint32(q[4:])
			db := d * (0.5 + float32(aux1>>28)) * 0.25
			for l := 0; l < 4; l++ {
				putGroup8(y[32*ib+8*l:], db, iq2xxsGrid[q[l]], ksignsIq2xs[(aux1>>(7*l))&127])
			}
		}
	}
}

func vecDotIQ2XXS(n int, w, a []byte) float32 {
	var sumf float32
	for b := 0; b < n/QK_K; b++ {
		x := w[b*iq2XXSBytes : (b+1)*iq2XXSBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		d := f16At(x) * y.d()
		q8 := y.qs()
		var bsum int32
		for ib := 0; ib < QK_K/32; ib++ {
			q := x[2+8*ib : 2+8*ib+8]
			aux1 := binary.LittleEndian.Uint32(q[4:])
			ls := int32(2*(aux1>>28) + 1)
			var sumi int32
			for l := 0; l < 4; l++ {
				sumi += dotGroup8(q8[32*ib+8*l:], iq2xxsGrid[q[l]], ksignsIq2xs[(aux1>>(7*l))&127])
			}
			bsum += sumi * ls
		}
		sumf += float32(d * float32(bsum))
	}
	return 0.125 * sumf
}

func dequantizeIQ2XS(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*iq2XSBytes : (b+1)*iq2XSBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		d := f16At(blk)
		scales := blk[66:74]
		for ib := 0; ib < QK_K/32; ib++ {
			db := [2]float32{
				d * (0.5 + float32(scales[ib]&0xf)) * 0.25,
				d * (0.5 + float32(scales[ib]>>4)) * 0.25,
			}
			for l := 0; l < 4; l++ {
				q := le16(blk[2+2*(4*ib+l):])
				putGroup8(y[32*ib+8*l:], db[l/2], iq2xsGrid[q&511], ksignsIq2xs[q>>9])
			}
		}
	}
}

func vecDotIQ2XS(n int, w, a []byte) float32 {
	var sumf float32
	for b := 0; b < n/QK_K; b++ {
		x := w[b*iq2XSBytes : (b+1)*iq2XSBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		d := f16At(x) * y.d()
		q8 := y.qs()
		scales := x[66:74]
		var bsum int32
		for ib := 0; ib < QK_K/32; ib++ {
			ls := [2]int32{2*int32(scales[ib]&0xf) + 1, 2*int32(scales[ib]>>4) + 1}
			for h := 0; h < 2; h++ {
				var sumi int32
				for l := 2 * h; l < 2*h+2; l++ {
					q := le16(x[2+2*(4*ib+l):])
					sumi += dotGroup8(q8[32*ib+8*l:], iq2xsGrid[q&511], ksignsIq2xs[q>>9])
				}
				bsum += sumi * ls[h]
			}
		}
		sumf += float32(d * float32(bsum))
	}
	return 0.125 * sumf
}

// iq2SIndex is the 10-bit grid index of group l (0-3) of 32-weight block ib.
func iq2SIndex(qs, qh []byte, ib, l int) int {
	return int(qs[4*ib+l]) | (int(qh[ib])<<(8-2*l))&0x300
}

func dequantizeIQ2S(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*iq2SBytes : (b+1)*iq2SBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		d := f16At(blk)
		qs, signs, qh, scales := blk[2:34], blk[34:66], blk[66:74], blk[74:82]
		for ib := 0; ib < QK_K/32; ib++ {
			db := [2]float32{
				d * (0.5 + float32(scales[ib]&0xf)) * 0.25,
				d * (0.5 + float32(scales[ib]>>4)) * 0.25,
			}
			for l := 0; l < 4; l++ {
				putGroup8(y[32*ib+8*l:], db[l/2], iq2sGrid[iq2SIndex(qs, qh, ib, l)], signs[4*ib+l])
			}
		}
	}
}

func vecDotIQ2S(n int, w, a []byte) float32 {
	var sumf float32
	for b := 0; b < n/QK_K; b++ {
		x := w[b*iq2SBytes : (b+1)*iq2SBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		d := f16At(x) * y.d()
		q8 := y.qs()
		qs, signs, qh, scales := x[2:34], x[34:66], x[66:74], x[74:82]
		var bsum int32
		for ib := 0; ib < QK_K/32; ib++ {
			ls1 := 1 + 2*int32(scales[ib]&0xf)
			ls2 := 1 + 2*int32(scales[ib]>>4)
			var sumi1, sumi2 int32
			for l := 0; l < 2; l++ {
				sumi1 += dotGroup8(q8[32*ib+8*l:], iq2sGrid[iq2SIndex(qs, qh, ib, l)], signs[4*ib+l])
			}
			for l := 2; l < 4; l++ {
				sumi2 += dotGroup8(q8[32*ib+8*l:], iq2sGrid[iq2SIndex(qs, qh, ib, l)], signs[4*ib+l])
			}
			bsum += ls1*sumi1 + ls2*sumi2
		}
		sumf += float32(d * float32(bsum))
	}
	return 0.125 * sumf
}
