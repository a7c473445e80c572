package main

import (
	"fmt"
	"strings"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The q36 variant of the 256-bit EVEX VBMI prepared Q3_K kernels (xLoop
// with q36Gen set; registered where the CPU has VBMI and GFNI). The loop
// was short of issue slots and loads rather than of any one unit (Zen 4,
// 1 thread: each vector op or load taken out of a block gained ~0.7-1%),
// so the variant takes work out of the block:
//
//   - each vector's scale dword comes from the stack as VPDPWSSD's
//     embedded broadcast, not from a VPERMD; lrPair stores the next
//     pair's scale words while it works on a pair (stored and loaded in
//     the same pair waits on store-to-load forwarding: slower than VPERMD);
//   - the 6-bit scales are decoded by two VPMULTISHIFTQB (q3Decode);
//   - the GFNI matrices are registers (VPERMD's eight index registers no
//     longer are).
//
// The integer lanes and the float work are the plain kernels' (the same
// VPMADDUBSW/VPSUBW/VPDPWSSD per vector, lrPair's block order), so the
// result is the same float; TestQ36Exact compares them bit for bit.
// Zen 4, 1 thread, vnni256 MatVec 4096x4096: 14.8 -> 17.7 GB/s.
//
// Q6_K got the same (its int8 scales need no decoding) and its qh bits
// by GFNI: +5% in L2, the same from L3, but from DRAM (16384x4096) 20 ->
// 13-15 GB/s: reading the scales of blocks two and three ahead (600-800
// bytes) runs ahead of the hardware prefetcher's stream (a PREFETCHT0 of
// the pair after made it 7; decoding at the end of the pair, -7% and no
// gain in L2). Q3_K's are 300-400 bytes ahead and lose nothing from DRAM.

// q36Gen, while set, makes xLoop emit the q36 variant: it loads the
// registers the kernel keeps.
var q36Gen func(t *target) *q36Regs

// q36Regs is what a q36 kernel keeps, and how its blocks' scales reach
// the stack.
type q36Regs struct {
	q3mats [8]Op // Q3_K: lrQ3KQuantGFNI's matrix of each vector
	q3ctl  [2]VecVirtual
	q3mask VecVirtual
	// decode stores the scale words of the block at a weight address.
	decode func(w, stack Mem)
	// pre: lrPair has stored the block's scale words an iteration ahead.
	pre bool
	// stored: the block's scale words are on the stack (block consumes it).
	stored bool
}

func q36Name(fn string) string {
	if strings.HasPrefix(fn, "dot") {
		return "q36D" + fn[1:] // dotQ3KP... -> q36DotQ3KP...
	}
	return "q36" + strings.ToUpper(fn[:1]) + fn[1:] // lrDot... -> q36LrDot...
}

// genQ36 emits the q36 kernels of a 256-bit EVEX target: its prepared
// kinds only (one row, and tile).
func genQ36(t *target) {
	all := q63Kinds
	q63Kinds = nil
	for _, k := range all {
		if k.prep {
			q63Kinds = append(q63Kinds, k)
		}
	}
	q36Gen = q36Q3Regs
	genQ3KExact(t, true)
	q36Gen = nil
	q63Kinds = all
}

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
	r.q3mask = t.splat(0x3c3c3c3c)
	r.decode = r.q3Decode
	return r
}

// scalesTo stores the scale words of the block at wp at stack, unless
// lrPair did.
func (r *q36Regs) scalesTo(wp Register, stack Mem) {
	if !r.pre {
		r.decode(Mem{Base: wp}, stack)
	}
	r.stored = true
}

// q3Decode stores the sixteen 6-bit scales of the Q3_K block at w, minus
// 32, as words (ggml's kmask unpacking, bit for bit): two VPMULTISHIFTQB
// put each scale's low four bits at bits 2..5 of its byte and its two
// high bits at 6..7, the top bit flipped (so that, read as a signed 6-bit
// number, the field is the scale minus 32), and a sign extension and an
// arithmetic shift by 2 make it a word.
func (r *q36Regs) q3Decode(w, stack Mem) {
	lo, hi := YMM(), YMM()
	VPMULTISHIFTQB_BCST(w.Offset(96), r.q3ctl[0], lo)
	VPMULTISHIFTQB_BCST(w.Offset(102), r.q3ctl[1], hi) // 102..109: the block's last 8 bytes
	VPTERNLOGD(U8(0xd8), r.q3mask, lo, hi)             // hi = mask ? lo : hi
	VPXORD_BCST(constU32(0x80808080), hi, hi)
	sw := YMM()
	VPMOVSXBW(hi.AsX(), sw)
	VPSRAW(U8(2), sw, sw)
	VMOVDQU64(sw, stack)
}

// q36Q3Ctl is q3Decode's VPMULTISHIFTQB control: byte k takes scale k's
// low four bits (h 0; from the qword scales[0:8]: byte k%8, its high
// nibble for k >= 8) to bits 2..5, or its two high bits (h 1; from the
// qword at scales+6: bits 2(k/4) of scales[8+k%4]) to bits 6..7. Only the
// low 128-bit lane is used.
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
