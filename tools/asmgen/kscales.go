package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Helpers that unpack K-quant blocks: scale tables and quant bit fields.

// laneConst returns a constant of the target's width whose every 128-bit
// lane holds the four dwords d.
func (t *target) laneConst(name string, d [4]uint32) Mem {
	var b []byte
	for l := 0; l < t.w/16; l++ {
		for _, v := range d {
			b = append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		}
	}
	return constData(name+map[int]string{32: "_y", 64: "_z"}[t.w], b)
}

// q3KScales unpacks Q3_K's twelve bytes of 6-bit scales (biased by 32)
// into 16 bytes, in every 128-bit lane of the result, as ggml's kmask
// shuffle does:
//
//	s[0:4]   = a0&0x0f | (t<<4)&0x30     s[4:8]   = a1&0x0f | (t<<2)&0x30
//	s[8:12]  = a0>>4&0x0f | t&0x30       s[12:16] = a1>>4&0x0f | (t>>2)&0x30
//
// with a0, a1, t the three little-endian words.
func (t *target) q3KScales(wp Register) VecVirtual {
	v := t.vec()
	t.bcast16(Mem{Base: wp, Disp: 94}, v) // 94..109: ends with the block
	x, y := t.vec(), t.vec()
	// The words start at byte 2 of v.
	VPSHUFB(t.laneConst("q3a", [4]uint32{0x05040302, 0x09080706, 0x05040302, 0x09080706}), v, x)
	VPSRLVD(t.laneConst("q3ash", [4]uint32{0, 0, 4, 4}), x, x)
	t.and(t.laneConst("q3am", [4]uint32{0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f}), x, x)
	VPSHUFB(t.laneConst("q3t", [4]uint32{0x0d0c0b0a, 0x0d0c0b0a, 0x0d0c0b0a, 0x0d0c0b0a}), v, y)
	VPSLLVD(t.laneConst("q3tl", [4]uint32{4, 2, 0, 0}), y, y)
	VPSRLVD(t.laneConst("q3tr", [4]uint32{0, 0, 0, 2}), y, y)
	t.and(t.laneConst("q3tm", [4]uint32{0x30303030, 0x30303030, 0x30303030, 0x30303030}), y, y)
	t.or(y, x, x)
	return x
}

// k4Scales unpacks the 12-byte 6-bit scale/min table of Q4_K and Q5_K (at
// wp+4) into eight scale bytes then eight min bytes (get_scale_min_k4 for
// j = 0..7), in every 128-bit lane of the result. With a0, a1, a2 the three
// little-endian words:
//
//	sc[0:4] = a0&0x3f   sc[4:8] = a2&0x0f | (a0>>2)&0x30
//	m[0:4]  = a1&0x3f   m[4:8]  = (a2>>4)&0x0f | (a1>>2)&0x30
func (t *target) k4Scales(wp Mem) VecVirtual {
	v := t.vec()
	t.bcast16(wp.Offset(4), v)
	x, y := t.vec(), t.vec()
	VPSHUFD(U8(0x98), v, x) // a0 a2 a1 a2
	VPSRLVD(t.laneConst("k4sh", [4]uint32{0, 0, 0, 4}), x, x)
	t.and(t.laneConst("k4m", [4]uint32{0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f}), x, x)
	VPSHUFD(U8(0x50), v, y) // a0 a0 a1 a1
	VPSRLD(U8(2), y, y)
	t.and(t.laneConst("k4hm", [4]uint32{0, 0x30303030, 0, 0x30303030}), y, y)
	t.or(y, x, x)
	return x
}

// twoBit returns element vector i of a block whose 2-bit quants are packed
// as Q2_K/Q3_K's qs (32 bytes per 128 elements, bits 2j..2j+1 for element
// run j): the quants as bytes in [0, 3]. q caches the loaded qs.
func (t *target) twoBit(i int, qs Mem, q *VecVirtual, c03 Op) VecVirtual {
	u := t.vec()
	if t.zmm() {
		k, j := i/2, 2*(i%2)
		if i%2 == 0 {
			*q = t.vec()
			t.load32(qs.Offset(32*k), *q)
		}
		vshift(-2*j, -2*j-2, *q, u)
	} else {
		k, j := i/4, i%4
		if j == 0 {
			*q = t.vec()
			t.load32(qs.Offset(32*k), *q)
			t.and(c03, *q, u)
			return u
		}
		t.shiftBits(-2*j, *q, u)
	}
	t.and(c03, u, u)
	return u
}
