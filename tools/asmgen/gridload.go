package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The grid kernels (IQ1, IQ2, IQ3) build a sub-block's vector of grid
// entries from one plain load per entry, indexed by a general register,
// as ggml's AVX2 code does: hardware gathers (VPGATHERDD/DQ) are slow per
// element on Zen 4/5 (Zen 5, 4096² MatVec, 1 thread, best-of: IQ1_S
// 1.16 -> 0.82 ms with the plain loads, PDEP-made indices and a second
// accumulator chain; IQ3_XXS 1.80 -> 1.15 ms with them and the masked
// signs of gridk.go).
//
// The entries go in by broadcast loads, the first defining the register:
// with EVEX the rest merge into their element by a masked broadcast, with
// AVX2 by VPINSRQ/VPINSRD and VINSERTI128, as the C compilers make
// _mm256_set_epi64x. (Zen 5, 4096² MatVec, 1 thread, best of ~750: the
// two equal on the EVEX levels; on AVX2 the inserts are 3-5% faster than
// broadcasts merged by VPBLENDD.)

// gridLoad builds ymms of grid entries from the table at base.
type gridLoad struct {
	t    *target
	base Register
	// k[i]: the mask of element i+1 (EVEX); set by newGridLoad once per
	// function.
	k [3]Register
}

func newGridLoad(t *target, base Register) *gridLoad {
	g := &gridLoad{t: t, base: base}
	if t.evex() {
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

// qwords returns the four 8-byte entries at the indices idx(0..3)
// returns, asked for in that order, each right before its load.
func (g *gridLoad) qwords(idx func(i int) Register) VecVirtual {
	y := YMM()
	if g.t.evex() {
		VPBROADCASTQ(g.at(idx(0), 8), y)
		for i := 1; i < 4; i++ {
			VPBROADCASTQ(g.at(idx(i), 8), g.k[i-1], y)
		}
		return y
	}
	// Broadcasts define the whole register for avo's liveness (a VMOVQ
	// into y's low half would keep y live from the function's start).
	x := XMM()
	VPBROADCASTQ(g.at(idx(0), 8), y)
	VPINSRQ(U8(1), g.at(idx(1), 8), y.AsX(), y.AsX())
	VPBROADCASTQ(g.at(idx(2), 8), x)
	VPINSRQ(U8(1), g.at(idx(3), 8), x, x)
	VINSERTI128(U8(1), x, y, y)
	return y
}

// dwords returns the eight 4-byte entries at the indices idx(0..7)
// returns, asked for in that order, each right before its load (so that
// few index registers are live at once): two 128-bit halves, the three
// element masks serving both.
func (g *gridLoad) dwords(idx func(i int) Register) VecVirtual {
	y, x := YMM(), XMM()
	for h, v := range []VecVirtual{y, x} {
		VPBROADCASTD(g.at(idx(4*h), 4), v)
		for i := 1; i < 4; i++ {
			m := g.at(idx(4*h+i), 4)
			if g.t.evex() {
				VPBROADCASTD(m, g.k[i-1], v)
			} else {
				VPINSRD(U8(i), m, v.AsX(), v.AsX())
			}
		}
	}
	if g.t.evex() {
		VINSERTI32X4(U8(1), x, y, y)
	} else {
		VINSERTI128(U8(1), x, y, y)
	}
	return y
}

// byteIdx returns an idx for dwords or qwords: index i the byte at m+i.
func byteIdx(m Mem) func(i int) Register {
	return func(i int) Register {
		r := GP64()
		MOVBLZX(m.Offset(i), r.As32())
		return r
	}
}

// groupScales spreads ls, eight per-group dwords (ls|ls<<16), over two
// registers for scaleOf: groups 0-3 in both 128-bit lanes of the first,
// 4-7 of the second.
func groupScales(ls VecVirtual) [2]VecVirtual {
	r := [2]VecVirtual{YMM(), YMM()}
	VPERMQ(U8(0x44), ls, r[0])
	VPERMQ(U8(0xee), ls, r[1])
	return r
}

// scaleOf returns group ib's scale words: dword ib%4 of register ib/4's
// lanes (groupScales; iq2HalfScales and genIQ1M put a group's two 16-weight
// scales in the two lanes) in every dword of its lane. A register VPSHUFD
// is faster than VPDPWSSD's broadcast of a spilled dword (4096² IQ3_XXS
// MatVec, Zen 5, 1 thread, best of ~750: 1.12 against 1.26 ms).
func scaleOf(sc [2]VecVirtual, ib int) VecVirtual {
	l := YMM()
	VPSHUFD(U8(0x55*(ib%4)), sc[ib/4], l)
	return l
}

// wordIdx makes the four indices qs[l] | field l << 8 of a group of four
// grid entries from the four qs bytes (a dword) and four width-bit fields
// in the low bits of a word. With BMI2 (t.bmi2) PDEP deposits the bytes
// and the fields into four words and BEXTR takes each out (one
// instruction where a rotate and MOVWLZX are two); the plain AVX2 target,
// which may run where PDEP is microcoded (Zen 1/2), shifts and masks each
// field. Indices made in a
// vector and read back through the stack are slower: the 16-bit loads
// wait for the vector store (Zen 5, 4096² IQ1_M MatVec, 1 thread, best
// of ~900: 1.13 ms so, 0.84 ms with PDEP and a rotate and MOVWLZX an
// index, 0.73 ms with BEXTR).
type wordIdx struct {
	width    int
	bmi2     bool
	mLo, mHi Op       // BMI2: PDEP masks
	c16, c32 Register // BMI2: BEXTR controls
}

// newWordIdx: regs puts the PDEP masks in registers (where the kernel
// has two to spare) rather than memory operands.
func newWordIdx(t *target, width int, regs bool) *wordIdx {
	w := &wordIdx{width: width}
	if t.bmi2 {
		var hi uint64
		for l := 0; l < 4; l++ {
			hi |= uint64(1<<width-1) << (8 + 16*l)
		}
		w.bmi2 = true
		w.mLo, w.mHi = constU64(0x00ff00ff00ff00ff), constU64(hi)
		if regs {
			w.mLo, w.mHi = constGP(0x00ff00ff00ff00ff), constGP(hi)
		}
		w.c16, w.c32 = constGP(16|16<<8), constGP(32|16<<8)
	}
	return w
}

// idxOf returns an idx for qwords or dwords that hands out r.
func idxOf(r [4]Register) func(i int) Register { return func(i int) Register { return r[i] } }

func (w *wordIdx) words(qs, hi Mem) [4]Register {
	h := GP64()
	MOVWLZX(hi, h.As32())
	return w.wordsFrom(qs, h)
}

// wordsFrom is words with the fields in the low bits of h (kept).
func (w *wordIdx) wordsFrom(qs Mem, h GPVirtual) [4]Register {
	var r [4]Register
	if !w.bmi2 {
		for l := 0; l < 4; l++ {
			x, f := GP64(), GP32()
			MOVBLZX(qs.Offset(l), x.As32())
			MOVL(h.As32(), f)
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
	a, f := GP64(), GP64()
	MOVL(qs, a.As32())
	PDEPQ(w.mLo, a, a)
	PDEPQ(w.mHi, h, f)
	ORQ(f, a)
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

func constU64(v uint64) Mem {
	var b []byte
	for i := 0; i < 8; i++ {
		b = append(b, byte(v>>(8*i)))
	}
	return constData(fmt.Sprintf("c64_%016x", v), b)
}
