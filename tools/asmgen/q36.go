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
// Q6_K (q36Q6Regs) has its q36 kernels again, changed where session 6's
// lost from DRAM (16384x4096: 20 -> 13-15 GB/s, its scale reads two and
// three blocks ahead outrunning the prefetcher's stream):
//
//   - a pair stores its own scale words at its start (read from the
//     lines being streamed) and loads them in the same pair;
//   - the plain kernel prefetches the weights q36Q6Pf (4 KiB) ahead into
//     L1, seven PREFETCHT0 a pair;
//   - quants in two operations (three for run 3) by GFNI: q36Q6Quant.
//
// Measured on this session's machine (an Intel Xeon, family 6 model 207,
// not the Zen 4 of the notes above; level vnni256 forced), 1 thread,
// MatVec GB/s old -> new (llama.cpp), medians of 5 alternated runs:
// 4096x4096 18.2 -> 23.2 (17.3); 32768x4096 8.6 -> 14.9 (7.7); 4096x14336
// (tile kernel) 18.7 -> 19.7 (16.4). Without the prefetch: in L2 +13%, in
// L3 +6%, from DRAM +3%; the prefetch alone at 512 bytes gained nothing
// from DRAM, at 2-16 KiB +40-75% (noisy host bandwidth).

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
	// Q6_K (q6KQuantsEVEX): q6mats[j] moves run j's two qh bits (j 0, 1)
	// to bits 4..5, q6hi ql's high nibble to bits 0..3 (runs 2 and 3);
	// c30 is 0x30 in every byte.
	q6mats [2]Op
	q6hi   Op
	c30    Op
	// same: lrPair stores a pair's own scale words at its start (read
	// from the lines being streamed) instead of the next pair's.
	same bool
	// pfDist > 0: lrPair prefetches the pair's bytes that far ahead (plain
	// kernels; tile kernels have tileFetch).
	pfDist int
}

func q36Name(fn string) string {
	if strings.HasPrefix(fn, "dot") {
		return "q36D" + fn[1:] // dotQ3KP... -> q36DotQ3KP...
	}
	return "q36" + strings.ToUpper(fn[:1]) + fn[1:] // lrDot... -> q36LrDot...
}

// genQ36 emits the q36 kernels of a 256-bit EVEX target: its prepared
// kinds only (one row, and tile), and the tile kernels of two to four
// rows.
func genQ36(t *target) {
	all := q63Kinds
	q63Kinds = nil
	for _, k := range all {
		if k.prep {
			q63Kinds = append(q63Kinds, k)
		}
	}
	// Two to four prepared rows a tile at a time (lrDot*x2T..x4T): a
	// tile of four rows stays in L1, where four whole prepared rows did
	// not.
	for m := 2; m <= 4; m++ {
		q63Kinds = append(q63Kinds, struct {
			prep, tile bool
			m          int
		}{true, true, m})
	}
	q36Gen = q36Q3Regs
	genQ3KExact(t, true)
	q36Gen = q36Q6Regs
	genQ6KExact(t, true)
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

// q36Q6Pf is how far ahead of the pair it works on a q36 Q6_K kernel
// (not the tile one, which has tileFetch) prefetches the weights into L1.
const q36Q6Pf = 4096

// q36Q6Regs is Q6_K's q36Regs: GFNI matrices taking qh's fields of runs
// 0 and 1 to bits 4..5 and ql's high nibble to bits 0..3, scales stored
// at the start of the pair that uses them.
func q36Q6Regs(t *target) *q36Regs {
	r := &q36Regs{same: true, pfDist: q36Q6Pf}
	for j := range 2 {
		var m []byte
		for range 4 {
			m = append(m, 0, 0, 2<<(2*j), 1<<(2*j), 0, 0, 0, 0)
		}
		v := YMM()
		VMOVDQU64(constData(fmt.Sprintf("q36q6hb%d", j), m), v)
		r.q6mats[j] = v
	}
	var m []byte
	for range 4 {
		m = append(m, 0, 0, 0, 0, 1<<7, 1<<6, 1<<5, 1<<4) // bits 4..7 to 0..3
	}
	r.q6hi = YMM()
	VMOVDQU64(constData("q36q6hi", m), r.q6hi)
	r.c30 = t.splat(0x30303030)
	r.decode = r.q6Decode
	return r
}

// q6Decode stores the sixteen int8 scales of the Q6_K block at w as
// words.
func (r *q36Regs) q6Decode(w, stack Mem) {
	sw := YMM()
	VPMOVSXBW(w.Offset(192), sw)
	VMOVDQU64(sw, stack)
}

// q36Q6Quant is vector i (run j of its half) of a Q6_K block, from the
// half's permuted ql (two vectors) and qh: two operations, three for run
// 3, instead of the plain kernel's two or three plus two masks a half.
// Runs 0 and 1: qh's field moved to bits 4..5 (all else clear) by GFNI,
// ql's low nibble selected under 0x0f. Runs 2 and 3: ql's high nibble
// moved to bits 0..3 (all else clear) by GFNI, qh's field (in place for
// run 2, shifted down for run 3) or'ed in under 0x30.
func q36Q6Quant(r *q36Regs, j int, ql *[2]VecVirtual, qh, c0F VecVirtual) VecVirtual {
	if j < 2 {
		hb := YMM()
		q2lAffine(0, r.q6mats[j], qh, hb)
		VPTERNLOGD(U8(0xd8), c0F, ql[j], hb) // hb = c0F ? ql : hb
		return hb
	}
	lo := YMM()
	q2lAffine(0, r.q6hi, ql[j-2], lo)
	f := qh
	if j == 3 {
		f = YMM()
		VPSRLW(U8(2), qh, f)
	}
	VPTERNLOGD(U8(0xf8), r.c30, f, lo) // lo |= f & 0x30
	return lo
}
