package quant

import "encoding/binary"

// The 1-bit grid types. Each group of 8 weights is one entry of
// iq1s_grid (values -1, 0, 1) shifted by ±1/8: weight = dl*(grid + delta).
//
//	iq1_s (50 bytes): d fp16 | qs[32] grid low bits | qh uint16[8], one per
//	      32 weights: 3 high grid bits per group (bits 0-11), a 3-bit scale
//	      ls (bits 12-14, dl = d*(2*ls+1)) and the sign of delta (bit 15).
//	iq1_m (56 bytes): qs[32] grid low bits | qh[16]: per group of 8, 3 high
//	      grid bits and the sign of delta | scales[8] as 4 uint16: 3-bit ls
//	      per 16 weights, with the fp16 d spread over their top nibbles.
//
// Dequantize is ggml's dequantize_row_iq1_*, the dot products its
// ggml_vec_dot_iq1_*_q8_K_generic.

const (
	iq1SBytes = 50
	iq1MBytes = 56
	iq1Delta  = float32(0.125) // IQ1S_DELTA and IQ1M_DELTA
)

func init() {
	register(IQ1_S, &impl{dequantize: dequantizeIQ1S, vecDot: vecDotIQ1S})
	register(IQ1_M, &impl{dequantize: dequantizeIQ1M, vecDot: vecDotIQ1M})
}

// putGroup1 writes dl*(grid[j]+delta) for one iq1s_grid entry.
func putGroup1(y []float32, dl float32, g uint64, delta float32) {
	y = y[:8]
	for j := range y {
		y[j] = dl * (float32(int8(gridByte(g, j))) + delta)
	}
}

// dotGroup1 is sum q8[j]*grid[j] over one iq1s_grid entry.
func dotGroup1(q8 []byte, g uint64) int32 {
	q8 = q8[:8]
	var s int32
	for j := range q8 {
		s += int32(int8(q8[j])) * int32(int8(gridByte(g, j)))
	}
	return s
}

func dequantizeIQ1S(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*iq1SBytes : (b+1)*iq1SBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		d := f16At(blk)
		qs := blk[2:34]
		for ib := 0; ib < QK_K/32; ib++ {
			qh := le16(blk[34+2*ib:])
			dl := d * float32(2*((qh>>12)&7)+1)
			delta := iq1Delta
			if qh&0x8000 != 0 {
				delta = -iq1Delta
			}
			for l := 0; l < 4; l++ {
				idx := int(qs[4*ib+l]) | int((qh>>(3*l))&7)<<8
				putGroup1(y[32*ib+8*l:], dl, iq1sGrid[idx], delta)
			}
		}
	}
}

func vecDotIQ1S(n int, w, a []byte) float32 {
	var sumf float32
	for b := 0; b < n/QK_K; b++ {
		x := w[b*iq1SBytes : (b+1)*iq1SBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		q8 := y.qs()
		qs := x[2:34]
		var sumi, sumi1 int32
		for ib := 0; ib < QK_K/32; ib++ {
			qh := le16(x[34+2*ib:])
			ls := int32(2*((qh>>12)&7) + 1)
			delta := int32(1)
			if qh&0x8000 != 0 {
				delta = -1
			}
			var lsum int32
			for l := 0; l < 4; l++ {
				idx := int(qs[4*ib+l]) | int((qh>>(3*l))&7)<<8
				lsum += dotGroup1(q8[32*ib+8*l:], iq1sGrid[idx])
			}
			sumi += ls * lsum
			sumi1 += ls * delta * (y.bsum(2*ib) + y.bsum(2*ib+1))
		}
		// C: d_x * d_y * (sumi + IQ1S_DELTA*sumi1), each operation rounded.
		sumf += float32(float32(f16At(x)*y.d()) * (float32(sumi) + float32(iq1Delta*float32(sumi1))))
	}
	return sumf
}

// iq1MScale reassembles IQ1_M's fp16 super-block scale from the top
// nibbles of its four uint16 scale words.
func iq1MScale(sc []byte) float32 {
	s0, s1, s2, s3 := le16(sc), le16(sc[2:]), le16(sc[4:]), le16(sc[6:])
	return FP16ToFP32(s0>>12 | (s1>>8)&0x00f0 | (s2>>4)&0x0f00 | s3&0xf000)
}

// iq1MGroup returns grid index and delta sign (true: negative) of group l
// (0-3) of 32-weight block ib.
func iq1MGroup(qs, qh []byte, ib, l int) (int, bool) {
	h := qh[2*ib+l/2]
	if l%2 == 0 {
		return int(qs[4*ib+l]) | (int(h)<<8)&0x700, h&0x08 != 0
	}
	return int(qs[4*ib+l]) | (int(h)<<4)&0x700, h&0x80 != 0
}

// iq1MLs returns the two 3-bit scales of 32-weight block ib.
func iq1MLs(sc []byte, ib int) (int32, int32) {
	w := binary.LittleEndian.Uint16(sc[2*(ib/2):])
	sh := 6 * (ib % 2)
	return 2*int32((w>>sh)&7) + 1, 2*int32((w>>(sh+3))&7) + 1
}

func dequantizeIQ1M(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*iq1MBytes : (b+1)*iq1MBytes]
		y := dst[b*QK_K : (b+1)*QK_K]
		qs, qh, sc := blk[:32], blk[32:48], blk[48:56]
		d := iq1MScale(sc)
		for ib := 0; ib < QK_K/32; ib++ {
			ls1, ls2 := iq1MLs(sc, ib)
			dl := [2]float32{d * float32(ls1), d * float32(ls2)}
			for l := 0; l < 4; l++ {
				idx, neg := iq1MGroup(qs, qh, ib, l)
				delta := iq1Delta
				if neg {
					delta = -iq1Delta
				}
				putGroup1(y[32*ib+8*l:], dl[l/2], iq1sGrid[idx], delta)
			}
		}
	}
}

func vecDotIQ1M(n int, w, a []byte) float32 {
	var sumf float32
	for b := 0; b < n/QK_K; b++ {
		x := w[b*iq1MBytes : (b+1)*iq1MBytes]
		y := q8KBlock(a[b*q8KBytes : (b+1)*q8KBytes])
		q8 := y.qs()
		qs, qh, sc := x[:32], x[32:48], x[48:56]
		var sumi1, sumi2 int32
		for ib := 0; ib < QK_K/32; ib++ {
			var sum1, sum2 [2]int32
			for l := 0; l < 4; l++ {
				idx, neg := iq1MGroup(qs, qh, ib, l)
				g := q8[32*ib+8*l : 32*ib+8*l+8]
				var lsum2 int32
				for _, v := range g {
					lsum2 += int32(int8(v))
				}
				sum1[l/2] += dotGroup1(g, iq1sGrid[idx])
				if neg {
					lsum2 = -lsum2
				}
				sum2[l/2] += lsum2
			}
			ls1, ls2 := iq1MLs(sc, ib)
			sumi1 += sum1[0]*ls1 + sum1[1]*ls2
			sumi2 += sum2[0]*ls1 + sum2[1]*ls2
		}
		sumf += float32(float32(iq1MScale(sc)*y.d()) * (float32(sumi1) + float32(iq1Delta*float32(sumi2))))
	}
	return sumf
}
