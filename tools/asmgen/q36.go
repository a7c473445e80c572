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
	q6hm   [2]VecVirtual // Q6_K: the qh masks 0x33 and 0xcc
	q6mats [4]Op         // Q6_K with GFNI: run j's two qh bits to bits 4..5
	// stored: the block's scale words are on the stack, for VPDPWSSD's
	// embedded broadcast (block consumes it).
	stored bool
	// pre: lrPair stored them an iteration ahead (q36Pipe).
	pre bool
	// decode stores the scale words of the block at a weight address.
	decode func(w, stack Mem)
}

// q36Pipe: lrPair decodes the next pair's scales to the stack while it
// works on a pair, so that their stores are long done when loaded.
var q36Pipe = true

var q36Q6GFNI = true

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
	r.decode = r.q3Decode
	return r
}

// q36Q6Regs is Q6_K's q36Regs.
func q36Q6Regs(t *target) *q36Regs {
	r := &q36Regs{}
	if q36Q6GFNI {
		for j := range r.q6mats {
			var m []byte
			for range 4 {
				m = append(m, 0, 0, 2<<(2*j), 1<<(2*j), 0, 0, 0, 0)
			}
			v := YMM()
			VMOVDQU64(constData(fmt.Sprintf("q36q6hb%d", j), m), v)
			r.q6mats[j] = v
		}
	} else {
		r.q6hm = [2]VecVirtual{t.splat(0x33333333), t.splat(0xcccccccc)}
	}
	r.decode = r.q6Decode
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
// scalesTo stores the scale words of the block at wp at stack, unless
// lrPair did (r.pre).
func (r *q36Regs) scalesTo(wp Register, stack Mem) {
	if !r.pre {
		r.decode(Mem{Base: wp}, stack)
	}
	r.stored = true
}

// q6Decode stores the sixteen int8 scales of the Q6_K block at w as
// words.
func (r *q36Regs) q6Decode(w, stack Mem) {
	sw := YMM()
	VPMOVSXBW(w.Offset(192), sw)
	VMOVDQU64(sw, stack)
}

// q3Decode decodes the scales of the block at w (q3Scales).
func (r *q36Regs) q3Decode(w, stack Mem) {
	lo, hi := YMM(), YMM()
	VPMULTISHIFTQB_BCST(w.Offset(96), r.q3ctl[0], lo)
	VPMULTISHIFTQB_BCST(w.Offset(102), r.q3ctl[1], hi)
	VPTERNLOGD(U8(0xd8), r.q3mask, lo, hi) // hi = mask ? lo : hi
	VPXORD_BCST(constU32(0x80808080), hi, hi)
	sw := YMM()
	VPMOVSXBW(hi.AsX(), sw)
	VPSRAW(U8(2), sw, sw)
	VMOVDQU64(sw, stack)
}

// genQ36 emits the q36 kernels of a 256-bit EVEX target.
func genQ36(t *target) {
	q36Gen = q36Q3Regs
	q36Kinds(func() { genQ3KExact(t, true) })
	q36Gen = q36Q6Regs
	q36Kinds(func() { genQ6KExact(t, true) })
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
