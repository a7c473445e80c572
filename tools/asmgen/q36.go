package main

import (
	"fmt"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The q36 variant of the 256-bit EVEX prepared Q3_K/Q6_K kernels (xLoop
// with q36Gen set): loads and shuffles taken out of the vector loop.

// q36Gen, while set, makes xLoop emit the q36 variant: it returns the
// registers the kernel keeps.
var q36Gen func(t *target) *q36Regs

// q36Regs is what a q36 kernel keeps in registers.
type q36Regs struct {
	q3mats [8]Op // Q3_K: the GFNI matrices of lrQ3KQuantGFNI, per vector
	q3ctl  [2]VecVirtual
	q3mask VecVirtual
	// half, when set, is the block's scale words: half[h] holds words
	// 8h..8h+7 in both 128-bit lanes.
	half [2]VecVirtual
	// stored: the block's scale words are on the stack instead (q36Store).
	stored bool
	// pre: lrPair stored them an iteration ahead (q36Pipe).
	pre bool
}

// q36Pipe: lrPair decodes the next pair's scales to the stack while it
// works on a pair, so that their stores are long done when loaded.
var q36Pipe = true

// q36Store: Q3_K scale words go to the stack, for VPDPWSSD's embedded
// broadcast, rather than to registers for VPSHUFD.
var q36Store = true

func q36Name(fn string) string {
	if strings.HasPrefix(fn, "dot") {
		return "q36D" + fn[1:]
	}
	return "q36" + strings.ToUpper(fn[:1]) + fn[1:]
}

// q36Q3Regs loads Q3_K's GFNI matrices.
func q36Q3Regs(t *target) *q36Regs {
	r := &q36Regs{}
	for i := range r.q3mats {
		v := YMM()
		VMOVDQU64(lrQ3KMatrix(i), v)
		r.q3mats[i] = v
	}
	for h := range r.q3ctl {
		r.q3ctl[h] = YMM()
		VMOVDQU64(q36Q3Ctl(h), r.q3ctl[h])
	}
	r.q3mask = YMM()
	VPBROADCASTD(constU32(0x3c3c3c3c), r.q3mask)
	return r
}

// q36Q3Ctl is the VPMULTISHIFTQB control that puts, in byte k of each
// 128-bit lane, scale k's low four bits (h 0: from scales[0:8], broadcast)
// or its two high bits (h 1: from the eight bytes at scales+6) at bits
// 2..5 or 6..7 of the byte.
func q36Q3Ctl(h int) Mem {
	var b []byte
	for range 2 {
		for k := 0; k < 16; k++ {
			pos := 8*(k%8) + 4*(k/8) - 2
			if h == 1 {
				pos = 8*(2+k%4) + 2*(k/4) - 6
			}
			b = append(b, byte(pos&63))
		}
	}
	return constData(fmt.Sprintf("q36q3ctl%d", h), b)
}

// q3Scales decodes a Q3_K block's sixteen 6-bit scales, minus 32, into
// r.half (ggml's kmask unpacking, bit for bit): each scale's six bits
// land in bits 2..7 of a byte, its top bit flipped (so that, read as a
// signed 6-bit number, it is the scale minus 32), and an arithmetic shift
// of that byte as a word's high byte sign-extends it.
func (r *q36Regs) q3Scales(wp Register, stack Mem) {
	if r.pre {
		r.stored = true
		return
	}
	r.q3Decode(Mem{Base: wp}, stack)
}

// q3Decode decodes the scales of the block at w (q3Scales).
func (r *q36Regs) q3Decode(w, stack Mem) {
	lo, hi := YMM(), YMM()
	VPMULTISHIFTQB_BCST(w.Offset(96), r.q3ctl[0], lo)
	VPMULTISHIFTQB_BCST(w.Offset(102), r.q3ctl[1], hi)
	VPTERNLOGD(U8(0xd8), r.q3mask, lo, hi) // hi = mask ? lo : hi
	VPXORD_BCST(constU32(0x80808080), hi, hi)
	if q36Store {
		w := YMM()
		VPMOVSXBW(hi.AsX(), w)
		VPSRAW(U8(2), w, w)
		VMOVDQU64(w, stack)
		r.stored = true
		return
	}
	for h := range r.half {
		w := YMM()
		if h == 0 {
			VPUNPCKLBW(hi, hi, w)
		} else {
			VPUNPCKHBW(hi, hi, w)
		}
		VPSRAW(U8(10), w, w)
		r.half[h] = w
	}
}

// scales returns the scale-word picker of a block: vector i's two scale
// words in every dword, by an in-lane VPSHUFD from sw's low or high four
// dwords copied to both lanes (VPERMD needs an index register per vector).
func (r *q36Regs) scales(t *target, sw VecVirtual) func(i int) VecVirtual {
	half := r.half
	r.half = [2]VecVirtual{}
	return func(i int) VecVirtual {
		h := i / 4
		if half[h] == nil {
			half[h] = YMM()
			VPERMQ(U8(0x44+0xaa*h), sw, half[h])
		}
		s := YMM()
		VPSHUFD(U8(0x55*(i%4)), half[h], s)
		return s
	}
}

// genQ36 emits the q36 kernels of a 256-bit EVEX target.
func genQ36(t *target) {
	q36Gen = q36Q3Regs
	q36Kinds(func() { genQ3KExact(t, true) })
	q36Gen = nil
}

// q36Kinds runs gen with q63Kinds cut to the prepared kinds.
func q36Kinds(gen func()) {
	all := q63Kinds
	q63Kinds = nil
	for _, k := range all {
		if k.prep {
			q63Kinds = append(q63Kinds, k)
		}
	}
	gen()
	q63Kinds = all
}
