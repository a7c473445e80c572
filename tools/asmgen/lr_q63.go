package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// Speed-ups of the exact Q3_K/Q6_K kernels on prepared rows (xLoop and
// block in exact_q6q3.go call them): GFNI quants for Q3_K, and two blocks
// at a time. None changes an operation the
// reference's result depends on: integer sums stay exact, and the float
// work stays per block, in block order.

// lrJob is one block's work split for interleaving: step(i) emits vector
// i's integer work, finish the float work.
type lrJob struct {
	step   func(i int)
	finish func()
}

// lrQ3KQuantGFNI is vector i (run j of its 128) of a 256-bit Q3_K block on
// a CPU with VBMI and GFNI (the VBMI kernels' gate): an affine map moves
// bit i of each permuted hmask byte to bit 2 with all else clear, and one
// VPTERNLOGD takes bits 0..1 from the run's 2-bit field shifted down, the
// rest from it: three operations, two for run 0, instead of four.
func lrQ3KQuantGFNI(i, j int, q, hm, c03 VecVirtual, cm Op) VecVirtual {
	if cm == nil {
		cm = lrQ3KMatrix(i)
	}
	h := YMM()
	Instruction(&ir.Instruction{
		Opcode: "VGF2P8AFFINEQB", Operands: []Op{U8(0), cm, hm, h},
		Inputs: []Op{cm, hm}, Outputs: []Op{h}, ISA: []string{"GFNI"},
	})
	qs := q
	if j > 0 {
		qs = YMM()
		VPSRLW(U8(2*j), q, qs)
	}
	VPTERNLOGD(U8(0xd8), c03, qs, h) // h = c03 ? qs : h
	return h
}

// lrQ3KMatrix is lrQ3KQuantGFNI's affine matrix of vector i.
func lrQ3KMatrix(i int) Mem {
	var m []byte
	for range 4 {
		m = append(m, 0, 0, 0, 0, 0, 1<<i, 0, 0) // row 5 picks output bit 2
	}
	return constData(fmt.Sprintf("lrq3hbit%d", i), m)
}

// lrPair emits a loop over pairs of blocks while nb >= 2, leaving nb odd
// blocks (0 or 1) to the one-block loop after it: both blocks' weights
// are decoded and multiplied vector by vector side by side, so that the
// second block's independent work is ready while the first one's chains
// wait, and their float work is added in block order, as one block at a
// time does. A q36 kernel's pair takes its scale words from the stack,
// where the pair before stored them (q36.go), and stores the next pair's;
// a q36 Q6_K pair (same) stores its own at its start instead.
func lrPair(c *xctx, fn string, nb Register, wsize int, ap, pf Register, body func(c *xctx, nacc int)) {
	pipe := c.q36 != nil && !c.q36.same
	same := c.q36 != nil && c.q36.same
	var slots, delta Register
	if same {
		slots = GP64()
		LEAQ(c.stack, slots)
	}
	if pipe {
		// Two sets of two blocks' scale words, at slots and slots+delta,
		// swapped every pair.
		slots, delta = GP64(), GP64()
		LEAQ(c.stack, slots)
		MOVQ(U32(64), delta)
		CMPQ(nb, U8(2))
		JB(LabelRef("q36pre" + fn))
		c.q36.decode(Mem{Base: c.wp}, Mem{Base: slots})
		c.q36.decode(Mem{Base: c.wp, Disp: wsize}, Mem{Base: slots, Disp: 32})
		Label("q36pre" + fn)
	}
	Label("lrpair" + fn)
	CMPQ(nb, U8(2))
	JB(LabelRef("lrpaired" + fn))
	if pipe {
		CMPQ(nb, U8(4))
		JB(LabelRef("q36next" + fn))
		next := GP64()
		LEAQ(Mem{Base: slots, Index: delta, Scale: 1}, next)
		c.q36.decode(Mem{Base: c.wp, Disp: 2 * wsize}, Mem{Base: next})
		c.q36.decode(Mem{Base: c.wp, Disp: 3 * wsize}, Mem{Base: next, Disp: 32})
		Label("q36next" + fn)
	}
	if same {
		c.q36.decode(Mem{Base: c.wp}, Mem{Base: slots})
		c.q36.decode(Mem{Base: c.wp, Disp: wsize}, Mem{Base: slots, Disp: 32})
	}
	if pf != nil {
		tileFetch(pf, c.wp, 2, wsize)
	} else if c.q36 != nil && c.q36.pfDist > 0 {
		for off := 0; off < 2*wsize; off += 64 {
			PREFETCHT0(Mem{Base: c.wp, Disp: c.q36.pfDist + off})
		}
	}
	var jobs []lrJob
	a, b := *c, *c
	a.jobs, b.jobs = &jobs, &jobs
	a.yd, b.yd = nil, nil
	b.wp = GP64()
	LEAQ(Mem{Base: c.wp, Disp: wsize}, b.wp)
	b.acts = []Mem{c.acts[0].Offset(q63PrepBlock)}
	if pipe || same {
		a.stack, b.stack = Mem{Base: slots}, Mem{Base: slots, Disp: 32}
		c.q36.pre = true
	}
	body(&a, 2)
	body(&b, 2)
	if pipe || same {
		c.q36.pre = false
	}
	for i := 0; i < 256/c.t.w; i++ {
		for _, j := range jobs {
			j.step(i)
		}
	}
	for _, j := range jobs {
		j.finish()
	}
	ADDQ(U32(2*wsize), c.wp)
	ADDQ(U32(2*q63PrepBlock), ap)
	if pipe {
		ADDQ(delta, slots)
		NEGQ(delta)
	}
	SUBQ(U8(2), nb)
	JMP(LabelRef("lrpair" + fn))
	Label("lrpaired" + fn)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
}
