package main

import (
	"fmt"

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

// runPerm permutes every 32-byte run of a vector into lane order: byte
// 4l+g takes byte 8g+l, so dword l holds the run's four elements of lane
// l (the exact K-quant kernels' grouping, exact_q4q5.go and
// exact_q6q3.go). With AVX512_VBMI it is one VPERMB; otherwise VPERMD
// (dwords 0 2 4 6 | 1 3 5 7 of each 256-bit half, giving each 128-bit lane
// the residues it holds) and an in-lane VPSHUFB, a 4×4 byte transpose.
type runPerm struct {
	t    *target
	vbmi bool
	idx  VecVirtual // VPERMB or VPERMD index
	tr   Op         // the VPSHUFB transpose (no VBMI): a register or memory
}

// newRunPerm loads the permutation's index; trReg keeps the transpose in
// a register too rather than reading it from memory.
func newRunPerm(t *target, vbmi, trReg bool) *runPerm {
	p := &runPerm{t: t, vbmi: vbmi}
	if !vbmi {
		p.tr = t.permLane()
		if trReg {
			r := t.vec()
			t.mov(t.permLane(), r)
			p.tr = r
		}
	}
	p.idx = t.vec()
	if vbmi {
		t.mov(t.permIndex(), p.idx)
	} else {
		t.mov(t.permDwords(), p.idx)
	}
	return p
}

// perm returns src (a register or memory) permuted run by run.
func (p *runPerm) perm(src Op) VecVirtual {
	d := p.t.vec()
	p.into(src, d)
	return d
}

// into permutes src run by run into d.
func (p *runPerm) into(src Op, d VecVirtual) {
	if p.vbmi {
		VPERMB(src, p.idx, d)
		return
	}
	VPERMD(src, p.idx, d)
	VPSHUFB(p.tr, d, d)
}

// load32 loads the 32 bytes at m, permuted, into every 256-bit half.
func (p *runPerm) load32(m Mem) VecVirtual {
	if !p.t.zmm() {
		return p.perm(m)
	}
	d := p.t.vec()
	p.t.load32(m, d)
	p.into(d, d)
	return d
}

// permIndex is VPERMB's index for t's width: each 256-bit half permuted
// within itself.
func (t *target) permIndex() Mem {
	var b []byte
	for h := 0; h < t.w/32; h++ {
		for p := 0; p < 32; p++ {
			b = append(b, byte(32*h+p/4+8*(p%4)))
		}
	}
	return constData(fmt.Sprintf("xpermb%d", t.w), b)
}

// permDwords is VPERMD's index for t's width: dwords 0 2 4 6 1 3 5 7 of
// each 256-bit half.
func (t *target) permDwords() Mem {
	var b []byte
	for h := 0; h < t.w/32; h++ {
		for _, d := range []int{0, 2, 4, 6, 1, 3, 5, 7} {
			b = append(b, byte(8*h+d), 0, 0, 0)
		}
	}
	return constData(fmt.Sprintf("xpermd%d", t.w), b)
}

// permLane is the VPSHUFB transpose after permDwords: byte 4l+k of a lane
// takes byte 4k+l.
func (t *target) permLane() Mem {
	var b []byte
	for i := 0; i < t.w/16; i++ {
		for p := 0; p < 16; p++ {
			b = append(b, byte(4*(p%4)+p/4))
		}
	}
	return constData(fmt.Sprintf("xpshufb%d", t.w), b)
}
