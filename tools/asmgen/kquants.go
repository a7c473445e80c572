package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// What the K-quant generators (exact_q2k.go, exact_q4q5.go, exact_q6q3.go)
// share: the Q8_K block layout, integer accumulators that hide the latency
// of VPDPWSSD/VPMADDWD chains, and small load helpers.

const (
	q8KSize  = 292
	q8KQs    = 4
	q8KBsums = 260
)

// isumAcc sums scaled int16 pairs into int32 lanes over one or more
// registers (two hide VPDPWSSD's latency within a block); the first use of
// each register is a plain VPMADDWD.
type isumAcc struct {
	t    *target
	regs []VecVirtual
	n    int
}

func (t *target) newIsum(k int) *isumAcc { return &isumAcc{t: t, regs: make([]VecVirtual, k)} }

func (a *isumAcc) add(p, s VecVirtual) {
	i := a.n % len(a.regs)
	if a.n < len(a.regs) {
		a.regs[i] = a.t.vec()
		VPMADDWD(s, p, a.regs[i])
	} else {
		a.t.dotw(p, s, a.regs[i])
	}
	a.n++
}

// addBytes adds the products of unsigned bytes u and the signed bytes at y,
// four per int32 lane (VPDPBUSD).
func (a *isumAcc) addBytes(u VecVirtual, y Mem) {
	i := a.n % len(a.regs)
	if a.n < len(a.regs) {
		a.regs[i] = a.t.vec()
		a.t.zero(a.regs[i])
	}
	vnniOp("VPDPBUSD", y, u, a.regs[i])
	a.n++
}

func (a *isumAcc) sum() VecVirtual {
	for _, r := range a.regs[1:] {
		VPADDD(r, a.regs[0], a.regs[0])
	}
	return a.regs[0]
}

// mov loads a vector of any width; EVEX needs the explicit element size.
func (t *target) mov(m Mem, dst Op) {
	if t.evex() {
		VMOVDQU64(m, dst)
	} else {
		VMOVDQU(m, dst)
	}
}

// halfs loads the fp16 value(s) at m as float32 into an xmm: two adjacent
// ones when both fit inside the block, else one.
func halfs(m Mem, two bool) VecVirtual {
	x := XMM()
	if two {
		VMOVD(m, x)
	} else {
		VPBROADCASTW(m, x)
	}
	VCVTPH2PS(x, x)
	return x
}

// runBits is, for vector i of a block, a constant whose bytes hold the bit
// that selects the vector's element run (32 elements) in a per-element
// bitmap such as Q3_K's hmask or Q5_K's qh: 1<<i for a 256-bit vector,
// 1<<2i and 1<<(2i+1) in the halves of a 512-bit one.
func (t *target) runBits(i int) Mem {
	var b []byte
	for r := 0; r < 8; r++ {
		for k := 0; k < 32; k++ {
			b = append(b, 1<<r)
		}
	}
	return constData("runbits", b).Offset(i * t.w)
}
