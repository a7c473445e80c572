package quant

import (
	"encoding/binary"
)

// IQ4_NL and IQ4_XS: 4-bit codes that index a fixed non-linear table of
// 16 int8 values (kvalues_iq4nl) instead of standing for themselves.
// Element j of a 32-group sits in the low nibble of qs[j], element j+16 in
// its high nibble, as in Q4_0.
//
//	iq4_nl: d fp16 | qs[16]                                   value = d*kv[code]
//	iq4_xs: d fp16 | scales_h u16 | scales_l[4] | qs[128]     value = d*(ls-32)*kv[code]
//
// IQ4_XS is a 256-element super-block of eight 32-groups, each with a 6-bit
// scale ls: its low 4 bits in a nibble of scales_l (group 2k low, 2k+1
// high), its top 2 bits at bits 2g..2g+1 of scales_h. IQ4_NL dots against
// Q8_0 activations, IQ4_XS against Q8_K.

const (
	iq4NLBytes = 18
	iq4XSBytes = 136
	// iq4NLTry is the scale search ggml_quantize_chunk (quantize_iq4_nl,
	// quantize_iq4_xs) runs: ±7 steps around the first guess.
	iq4NLTry = 7
)

// IQ4NLValues is kvalues_iq4nl, the table both types' codes index.
var IQ4NLValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

func init() {
	// QuantizeImatrix (iq_quant_common.go) calls the imatrix forms a row
	// at a time.
	register(IQ4_NL, &impl{dequantize: dequantizeIQ4NL, quantize: quantizeIQ4NL, vecDot: vecDotIQ4NL, quantizeImatrix: quantizeIQ4NLRows})
	register(IQ4_XS, &impl{dequantize: dequantizeIQ4XS, quantize: quantizeIQ4XS, vecDot: vecDotIQ4XS, quantizeImatrix: quantizeIQ4XSRows})
}

func dequantizeIQ4NL(src []byte, dst []float32) {
	for i := 0; i < len(dst)/32; i++ {
		b := src[iq4NLBytes*i : iq4NLBytes*(i+1)]
		d := f16At(b)
		y := dst[32*i : 32*i+32]
		for j := 0; j < 16; j++ {
			y[j] = d * float32(IQ4NLValues[b[2+j]&0xF])
			y[j+16] = d * float32(IQ4NLValues[b[2+j]>>4])
		}
	}
}

// iq4XSScale returns the 6-bit scale of group ib of an IQ4_XS block.
func iq4XSScale(blk []byte, ib int) int {
	h := binary.LittleEndian.Uint16(blk[2:])
	return int(blk[4+ib/2]>>(4*(ib%2))&0xF) | int(h>>(2*ib)&3)<<4
}

func dequantizeIQ4XS(src []byte, dst []float32) {
	for i := 0; i < len(dst)/QK_K; i++ {
		b := src[iq4XSBytes*i : iq4XSBytes*(i+1)]
		d := f16At(b)
		for ib := 0; ib < 8; ib++ {
			dl := d * float32(iq4XSScale(b, ib)-32)
			qs := b[8+16*ib : 8+16*ib+16]
			y := dst[QK_K*i+32*ib : QK_K*i+32*ib+32]
			for j := 0; j < 16; j++ {
				y[j] = dl * float32(IQ4NLValues[qs[j]&0xF])
				y[j+16] = dl * float32(IQ4NLValues[qs[j]>>4])
			}
		}
	}
}

func quantizeIQ4NL(src []float32, dst []byte) { quantizeIQ4NLRows(src, dst, nil) }
func quantizeIQ4XS(src []float32, dst []byte) { quantizeIQ4XSRows(src, dst, nil) }

// quantizeIQ4NLRows is quantize_iq4_nl; qw, when not nil, is the importance
// matrix row repeated for every row (len(qw) divides len(src)).
func quantizeIQ4NLRows(src []float32, dst []byte, qw []float32) {
	var s iq4Scratch
	for i := 0; i < len(src)/32; i++ {
		var w []float32
		if qw != nil {
			w = qw[32*i%len(qw):][:32]
		}
		b := dst[iq4NLBytes*i : iq4NLBytes*(i+1)]
		s.quantize(src[32*i:32*i+32], w, b[:2], nil, b[2:])
	}
}

// quantizeIQ4XSRows is quantize_iq4_xs; qw as for quantizeIQ4NLRows.
func quantizeIQ4XSRows(src []float32, dst []byte, qw []float32) {
	var s iq4Scratch
	for i := 0; i < len(src)/QK_K; i++ {
		var w []float32
		if qw != nil {
			w = qw[QK_K*i%len(qw):][:QK_K]
		}
		b := dst[iq4XSBytes*i : iq4XSBytes*(i+1)]
		s.quantize(src[QK_K*i:QK_K*(i+1)], w, b[:2], b[2:8], b[8:])
	}
}

// iq4Scratch holds quantize_row_iq4_nl_impl's work arrays.
type iq4Scratch struct {
	scales [QK_K / 32]float32
	weight [32]float32
	L      [QK_K]uint8
}

// quantize is quantize_row_iq4_nl_impl with block_size 32 and ntry 7 for a
// super-block x of 32 (IQ4_NL, sc nil) or 256 elements (IQ4_XS, sc the
// scales_h and scales_l bytes). It writes the fp16 scale to dh and the
// packed codes to q4. qw is the importance matrix, or nil.
func (s *iq4Scratch) quantize(x, qw []float32, dh, sc, q4 []byte) {
	values := &IQ4NLValues
	var sigma2 float32
	for _, v := range x {
		sigma2 += float32(v * v)
	}
	sigma2 *= 2 / float32(len(x))
	clear(q4)
	putF16(dh, 0)

	var maxScale, amaxScale float32
	nb := len(x) / 32
	for ib := 0; ib < nb; ib++ {
		xb := x[32*ib : 32*ib+32]
		Lb := s.L[32*ib : 32*ib+32]
		w := s.weight[:]
		for j, v := range xb {
			if qw != nil {
				w[j] = qw[32*ib+j] * sqrt32(sigma2+float32(v*v))
			} else {
				w[j] = v * v
			}
		}
		var amax, max float32
		for _, v := range xb {
			if ax := abs32(v); ax > amax {
				amax, max = ax, v
			}
		}
		if amax < groupMaxEps {
			s.scales[ib] = 0
			continue
		}
		d := -max / float32(values[0])
		id := 1 / d
		var sumqx, sumq2 float32
		for j, v := range xb {
			l := bestIndexInt8(values, float32(id*v))
			Lb[j] = uint8(l)
			q := float32(values[l])
			sumqx += float32(float32(w[j]*q) * v)
			sumq2 += float32(float32(w[j]*q) * q)
		}
		d = 0
		if sumq2 > 0 {
			d = sumqx / sumq2
		}
		best := d * sumqx
		for itry := -iq4NLTry; itry <= iq4NLTry; itry++ {
			id = float32(itry+int(values[0])) / max
			sumqx, sumq2 = 0, 0
			for j, v := range xb {
				q := float32(values[bestIndexInt8(values, float32(id*v))])
				sumqx += float32(float32(w[j]*q) * v)
				sumq2 += float32(float32(w[j]*q) * q)
			}
			if sumq2 > 0 && sumqx*sumqx > best*sumq2 {
				d = sumqx / sumq2
				best = d * sumqx
			}
		}
		s.scales[ib] = d
		if ad := abs32(d); ad > amaxScale {
			amaxScale, maxScale = ad, d
		}
	}

	if nb > 1 {
		clear(sc[:2])
		var h uint16
		d := -maxScale / 32
		putF16(dh, d)
		id := reciprocal(d)
		for ib := 0; ib < nb; ib++ {
			l := clampInt(nearestInt(float32(id*s.scales[ib])), -32, 31)
			dl := d * float32(l)
			idl := reciprocal(dl)
			for j, v := range x[32*ib : 32*ib+32] {
				s.L[32*ib+j] = uint8(bestIndexInt8(values, float32(idl*v)))
			}
			l += 32
			if ib%2 == 0 {
				sc[2+ib/2] = uint8(l & 0xF)
			} else {
				sc[2+ib/2] |= uint8(l&0xF) << 4
			}
			h |= uint16(l>>4) << (2 * ib)
		}
		binary.LittleEndian.PutUint16(sc, h)
	} else {
		putF16(dh, s.scales[0])
		id := reciprocal(s.scales[0])
		for j, v := range x {
			s.L[j] = uint8(bestIndexInt8(values, float32(id*v)))
		}
	}

	for i := 0; i < len(x)/32; i++ {
		for j := 0; j < 16; j++ {
			q4[16*i+j] = s.L[32*i+j] | s.L[32*i+16+j]<<4
		}
	}
}

// bestIndexInt8 is ggml's best_index_int8: the index of the table value
// nearest x (the upper one on ties), by bisection. A NaN x falls through
// both end tests and the bisection to index 15 via the final comparison.
func bestIndexInt8(val *[16]int8, x float32) int {
	if x <= float32(val[0]) {
		return 0
	}
	if x >= float32(val[15]) {
		return 15
	}
	ml, mu := 0, 15
	for mu-ml > 1 {
		mav := (ml + mu) / 2
		if x < float32(val[mav]) {
			mu = mav
		} else {
			ml = mav
		}
	}
	if x-float32(val[mu-1]) < float32(val[mu])-x {
		return mu - 1
	}
	return mu
}

// vecDotIQ4NL is ggml_vec_dot_iq4_nl_q8_0_generic.
func vecDotIQ4NL(n int, w, a []byte) float32 {
	var sumf float32
	for ib := 0; ib < n/32; ib++ {
		x := w[iq4NLBytes*ib : iq4NLBytes*(ib+1)]
		y := a[34*ib : 34*ib+34]
		d := f16At(y) * f16At(x)
		var sumi1, sumi2 int32
		for j := 0; j < 16; j++ {
			sumi1 += int32(int8(y[2+j])) * int32(IQ4NLValues[x[2+j]&0xF])
			sumi2 += int32(int8(y[2+j+16])) * int32(IQ4NLValues[x[2+j]>>4])
		}
		sumf += float32(d * float32(sumi1+sumi2))
	}
	return sumf
}

// vecDotIQ4XS is ggml_vec_dot_iq4_xs_q8_K_generic: one float accumulation
// per 32-group, scaled by d*d8*(ls-32).
func vecDotIQ4XS(n int, w, a []byte) float32 {
	var sumf float32
	for ibl := 0; ibl < n/QK_K; ibl++ {
		x := w[iq4XSBytes*ibl : iq4XSBytes*(ibl+1)]
		y := q8KBlock(a[q8KBytes*ibl : q8KBytes*(ibl+1)])
		d4d8 := f16At(x) * y.d()
		q8 := y.qs()
		for ib := 0; ib < 8; ib++ {
			dl := d4d8 * float32(iq4XSScale(x, ib)-32)
			qs := x[8+16*ib : 8+16*ib+16]
			q := q8[32*ib : 32*ib+32]
			var sumi1, sumi2 int32
			for j := 0; j < 16; j++ {
				sumi1 += int32(int8(q[j])) * int32(IQ4NLValues[qs[j]&0xF])
				sumi2 += int32(int8(q[j+16])) * int32(IQ4NLValues[qs[j]>>4])
			}
			sumf += float32(dl * float32(sumi1+sumi2))
		}
	}
	return sumf
}
