package main

import (
	"fmt"
	"os"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The grid kernels (IQ1, IQ2, IQ3) build a sub-block's vector of grid
// entries from one plain load per entry, indexed by a general register:
// hardware gathers (VPGATHERDD/DQ) are several times slower per element
// on Zen 4/5 (4096² IQ3_XXS MatVec, 1 thread: ~0.5 of its 1.6 ms went to
// the eight VPGATHERDDs of a super-block).
//
// The entries go in by broadcast loads, the first defining the register,
// the rest merged into their element: with EVEX by a masked broadcast
// (gridK), with AVX2 by VPBLENDD, which runs on any vector ALU pipe where
// the VPINSRQ/VINSERTI128 of the C compilers' _mm256_set_epi64x take the
// shuffle pipes.

// gridMode picks how the loads merge; ASMGEN_GRIDMODE=ins|blend|mask
// overrides it for measurements.
func gridMode(t *target) string {
	if m := os.Getenv("ASMGEN_GRIDMODE"); m != "" {
		if m == "mask" && !t.evex() {
			return "blend"
		}
		return m
	}
	if t.evex() {
		return "mask"
	}
	return "blend"
}

// gridLoad builds ymms of grid entries from the table at base.
type gridLoad struct {
	t    *target
	base Register
	mode string
	// k[i]: the mask of element i+1 (EVEX, mode mask); set by newGridLoad
	// once per function.
	k [3]Register
}

func newGridLoad(t *target, base Register) *gridLoad {
	g := &gridLoad{t: t, base: base, mode: gridMode(t)}
	if g.mode == "mask" {
		r := GP32()
		for i := range g.k {
			g.k[i] = K()
			MOVL(U32(2<<i), r)
			KMOVW(r, g.k[i])
		}
	}
	return g
}

func (g *gridLoad) at(idx Register, scale uint8) Mem {
	return Mem{Base: g.base, Index: idx, Scale: scale}
}

// qwords returns the four 8-byte entries at idx[0..3].
func (g *gridLoad) qwords(idx [4]Register) VecVirtual {
	y := YMM()
	switch g.mode {
	case "mask":
		VPBROADCASTQ(g.at(idx[0], 8), y)
		for i := 1; i < 4; i++ {
			VPBROADCASTQ(g.at(idx[i], 8), g.k[i-1], y)
		}
	case "blend":
		VPBROADCASTQ(g.at(idx[0], 8), y)
		for i := 1; i < 4; i++ {
			e := YMM()
			VPBROADCASTQ(g.at(idx[i], 8), e)
			VPBLENDD(U8(3<<(2*i)), e, y, y)
		}
	case "ins":
		// Broadcasts define the whole register for avo's liveness (a VMOVQ
		// into y's low half would keep y live from the function's start).
		x := XMM()
		VPBROADCASTQ(g.at(idx[0], 8), y)
		VPINSRQ(U8(1), g.at(idx[1], 8), y.AsX(), y.AsX())
		VPBROADCASTQ(g.at(idx[2], 8), x)
		VPINSRQ(U8(1), g.at(idx[3], 8), x, x)
		g.insertHigh(x, y)
	default:
		panic(fmt.Sprintf("asmgen: grid mode %q", g.mode))
	}
	return y
}

func (g *gridLoad) insertHigh(x, y VecVirtual) {
	if g.t.evex() {
		VINSERTI32X4(U8(1), x, y, y)
	} else {
		VINSERTI128(U8(1), x, y, y)
	}
}

// dwords returns the eight 4-byte entries at idx[0..7].
func (g *gridLoad) dwords(idx [8]Register) VecVirtual {
	y := YMM()
	switch g.mode {
	case "mask":
		// Two 128-bit halves: three element masks serve both.
		x := XMM()
		VPBROADCASTD(g.at(idx[0], 4), y)
		VPBROADCASTD(g.at(idx[4], 4), x)
		for i := 1; i < 4; i++ {
			VPBROADCASTD(g.at(idx[i], 4), g.k[i-1], y)
			VPBROADCASTD(g.at(idx[4+i], 4), g.k[i-1], x)
		}
		g.insertHigh(x, y)
	case "blend":
		VPBROADCASTD(g.at(idx[0], 4), y)
		for i := 1; i < 8; i++ {
			e := YMM()
			VPBROADCASTD(g.at(idx[i], 4), e)
			VPBLENDD(U8(1<<i), e, y, y)
		}
	case "ins":
		x := XMM()
		VPBROADCASTD(g.at(idx[0], 4), y)
		VPBROADCASTD(g.at(idx[4], 4), x)
		for i := 1; i < 4; i++ {
			VPINSRD(U8(i), g.at(idx[i], 4), y.AsX(), y.AsX())
			VPINSRD(U8(i), g.at(idx[4+i], 4), x, x)
		}
		g.insertHigh(x, y)
	default:
		panic(fmt.Sprintf("asmgen: grid mode %q", g.mode))
	}
	return y
}

// loadIdx loads n indices into fresh registers: MOVBLZX (size 1) or
// MOVWLZX (size 2) from m, m+size, ...
func loadIdx(m Mem, size, n int) []GPVirtual {
	r := make([]GPVirtual, n)
	for i := range r {
		r[i] = GP64()
		switch size {
		case 1:
			MOVBLZX(m.Offset(i), r[i].As32())
		case 2:
			MOVWLZX(m.Offset(2*i), r[i].As32())
		default:
			panic("loadIdx: size")
		}
	}
	return r
}

func idx4(r []GPVirtual) [4]Register { return [4]Register{r[0], r[1], r[2], r[3]} }

func idx8(r []GPVirtual) [8]Register {
	return [8]Register{r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]}
}

// dotwBcast adds the pairwise int16 products of p and the two words of
// the dword at m (in every dword) into acc: VPDPWSSD with an embedded
// broadcast under VNNI, else a broadcast and dotw.
func (t *target) dotwBcast(p VecVirtual, m Mem, acc VecVirtual) {
	if t.vnni {
		Instruction(&ir.Instruction{
			Opcode:   "VPDPWSSD",
			Suffixes: []string{"BCST"},
			Operands: []Op{m, p, acc},
			Inputs:   []Op{m, p, acc},
			Outputs:  []Op{acc},
			ISA:      []string{"AVX512_VNNI"},
		})
		return
	}
	l := YMM()
	VPBROADCASTD(m, l)
	t.dotw(p, l, acc)
}

// wordIdx makes the four indices qs[l] | field l << 8 of a group of four
// grid entries from the four qs bytes (a dword) and four width-bit fields
// in the low bits of a word. With BMI2 (the EVEX targets: every AVX-512
// CPU has a fast one) PDEP deposits the bytes and the fields into four
// words and BEXTR takes each out (one instruction where a rotate and
// MOVWLZX are two); the AVX2 target, which may run where PDEP is
// microcoded (Zen 2), shifts and masks each field. Indices made in a
// vector and read back through the stack are slower: the 16-bit loads
// wait for the vector store (Zen 5, 4096² IQ1_M MatVec, 1 thread, best
// of ~900: 1.13 ms against 0.73 ms with PDEP/BEXTR).
type wordIdx struct {
	width              int
	mLo, mHi, c16, c32 Register // BMI2: PDEP masks, BEXTR controls
}

func newWordIdx(t *target, width int) *wordIdx {
	w := &wordIdx{width: width}
	if t.evex() {
		var hi uint64
		for l := 0; l < 4; l++ {
			hi |= uint64(1<<width-1) << (8 + 16*l)
		}
		w.mLo, w.mHi = constGP(0x00ff00ff00ff00ff), constGP(hi)
		w.c16, w.c32 = constGP(16|16<<8), constGP(32|16<<8)
	}
	return w
}

func (w *wordIdx) words(qs, hi Mem) [4]Register {
	var r [4]Register
	if w.mLo == nil {
		h := GP32()
		MOVWLZX(hi, h)
		for l := 0; l < 4; l++ {
			x, f := GP64(), GP32()
			MOVBLZX(qs.Offset(l), x.As32())
			MOVL(h, f)
			switch s := 8 - w.width*l; {
			case s > 0:
				SHLL(U8(s), f)
			case s < 0:
				SHRL(U8(-s), f)
			}
			ANDL(U32((1<<w.width-1)<<8), f)
			ORL(f, x.As32())
			r[l] = x
		}
		return r
	}
	a, h := GP64(), GP64()
	MOVL(qs, a.As32())
	PDEPQ(w.mLo, a, a)
	MOVWLZX(hi, h.As32())
	PDEPQ(w.mHi, h, h)
	ORQ(h, a)
	i0, i1, i2 := GP64(), GP64(), GP64()
	MOVWLZX(a.As16(), i0.As32())
	BEXTRQ(w.c16, a, i1)
	BEXTRQ(w.c32, a, i2)
	SHRQ(U8(48), a)
	r[0], r[1], r[2], r[3] = i0, i1, i2, a
	return r
}

// constGP loads a 64-bit constant into a fresh register.
func constGP(v uint64) GPVirtual {
	r := GP64()
	MOVQ(U64(v), r)
	return r
}
