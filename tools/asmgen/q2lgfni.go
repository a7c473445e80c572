package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// GFNI table indices for the Q2_K table kernels (q2kLutN with gf): one
// VGF2P8AFFINEQB turns each quant byte into a table index, the 2-bit
// field j moved to bits 0..1 and the table slot in bits 2..3 (the
// immediate, XORed into bits the matrix leaves zero), where the plain
// kernels shift and then merge mask and slot with a VPTERNLOGD (which
// also loads its slot constant). Only how the index is made changes: the
// lookups, and so every integer sum, are the plain kernels'.
//
// Zen 4, 1 thread, vnni256 MatVec 4096x4096 (SideBySide): 16.5 -> 17.7
// GB/s. Loads are what the loop runs short of: the matrices in memory
// (one load per vector, like the VPTERNLOGD's) gain only 1.5%; in
// registers 7%, and the table multiplier in a register 1% more.

// q2lRegs is what a GFNI kernel keeps in registers; a nil *q2lRegs means
// no GFNI. mats[j] is the matrix of run j of a 256-bit kernel (1..3; run 0
// is a mask), or nil for a memory operand; mul, if set, is q2kMul.
type q2lRegs struct {
	mats [4]Op
	mul  Op
}

// q2lLoad returns nil without gfni; else the kernel's q2lRegs, loading
// the 256-bit matrices (and with mul the table multiplier) into registers.
// The 512-bit kernels take them from memory (a zmm vector is two runs,
// one matrix per 256-bit half).
func q2lLoad(t *target, gfni, mul bool) *q2lRegs {
	if !gfni {
		return nil
	}
	g := &q2lRegs{}
	if t.zmm() {
		return g
	}
	for j := 1; j < 4; j++ {
		r := t.vec()
		t.load32(q2lMatrix(t, j, j), r)
		g.mats[j] = r
	}
	if mul {
		r := t.vec()
		t.load32(q2kMul(), r)
		g.mul = r
	}
	return g
}

// q2lName is the kernel's name: the GFNI kernels carry the q2l prefix.
func q2lName(base string, t *target, gfni bool) string {
	if gfni {
		return "q2lD" + base[1:] + t.suffix // dotQ2K -> q2lDotQ2K
	}
	return base + t.suffix
}

// q2lMatrix is an affine matrix per 256-bit half: field lo of each byte
// in the low half, field hi in the high one (the same for a ymm), moved to
// bits 0..1, every other bit of the result zero. Byte 7-k of a qword's
// matrix is the mask of source bits whose parity is result bit k.
func q2lMatrix(t *target, lo, hi int) Mem {
	var m []byte
	for h := 0; h < t.w/32; h++ {
		j := lo
		if h == 1 {
			j = hi
		}
		for range 4 {
			m = append(m, 0, 0, 0, 0, 0, 0, 2<<(2*j), 1<<(2*j))
		}
	}
	return constData(fmt.Sprintf("q2lgf%d%d_%d", lo, hi, t.w), m)
}

func q2lAffine(imm int, m, src, dst Op) {
	Instruction(&ir.Instruction{
		Opcode: "VGF2P8AFFINEQB", Operands: []Op{U8(imm), m, src, dst},
		Inputs: []Op{m, src}, Outputs: []Op{dst}, ISA: []string{"GFNI"},
	})
}

// field is the table index of vector r of half n of a block whose quants
// (that half's 32 bytes, in both halves of a zmm) are in q. A ymm is run
// j = r of the half, as in q2kLutN: slot j of the half's table. A zmm is
// runs 2r and 2r+1 (low and high half), whose sub-blocks 8n+4r+L are in
// 128-bit lane L: q2lZmmTable puts them in slot 2n+r of lane L, so that
// one table serves the whole block.
func (g *q2lRegs) field(t *target, n, r int, q VecVirtual, c03 Op) VecVirtual {
	u := t.vec()
	switch {
	case t.zmm():
		q2lAffine(4*(2*n+r), q2lMatrix(t, 2*r, 2*r+1), q, u)
	case r == 0:
		t.and(c03, q, u)
	case g.mats[r] != nil:
		q2lAffine(4*r, g.mats[r], q, u)
	default:
		q2lAffine(4*r, q2lMatrix(t, r, r), q, u)
	}
	return u
}

// q2lZmmTable is the VPSHUFB control that picks, from the block's scales
// in every lane, [s s s s] for slot o = 2n+r of lane L: sub-block 8n+4r+L.
func q2lZmmTable() Mem {
	var idx []byte
	for l := 0; l < 4; l++ {
		for o := 0; o < 4; o++ {
			for range 4 {
				idx = append(idx, byte(8*(o/2)+4*(o%2)+l))
			}
		}
	}
	return constData("q2lzti", idx)
}

// q2lPipeline returns, for the 256-bit GFNI single-row kernel, the
// registers of the first group's tables, made here, and what makes the
// next group's tables into them once a group is done with them (if there
// is a next group: nb, not yet counted down, is at least two groups). The
// tables' loads and multiplies are then long done when a group starts
// (measured, 1 thread: +1% at 4096x4096, +5-10% at 32768x4096 from DRAM,
// where the early scale loads also run ahead of the weight stream; a
// PREFETCHT0 of the weights 1-4 KiB ahead instead loses 1-6%).
func q2lPipeline(t *target, gf *q2lRegs, wp, nb Register, c0F Op, fn string) ([][]VecVirtual, func()) {
	if gf == nil || t.zmm() {
		return nil, nil
	}
	pre := make([][]VecVirtual, q2kGroup)
	build := func(base Mem) {
		for b := range pre {
			pre[b] = t.q2kTables(base.Offset(84*b), c0F, gf, pre[b])
		}
	}
	build(Mem{Base: wp})
	k := 0
	return pre, func() {
		skip := fmt.Sprintf("q2lnext%d%s", k, fn)
		k++
		CMPQ(nb, U8(2*q2kGroup))
		JB(LabelRef(skip))
		build(Mem{Base: wp, Disp: 84 * q2kGroup})
		Label(skip)
	}
}
