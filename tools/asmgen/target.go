package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	"github.com/mmcloughlin/avo/ir"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// target is one instruction-set flavour of the kernels. The same generator
// code emits the AVX2 (256-bit) and AVX-512 (512-bit) bodies; the few
// mnemonics that differ between VEX and EVEX encodings go through the
// methods below.
type target struct {
	suffix string // appended to every function name
	w      int    // vector width in bytes: 32 or 64
	vnni   bool   // VPDPBUSD/VPDPWSSD available (AVX512_VNNI)
	// bmi2: PDEP/PEXT/BEXTR/RORX may be used, and are fast (every
	// AVX-512 CPU; the AVX2 plugin's avx2bmi2 kernels are for CPUs where
	// they are: Zen 1/2 microcode PDEP).
	bmi2 bool

	// memConsts makes konst return memory operands: set while emitting a
	// 256-bit kernel that needs all 16 registers for itself.
	memConsts bool
}

var targets = map[string]*target{
	"avx2":     {suffix: "AVX2", w: 32},
	"avx2bmi2": {suffix: "AVX2BMI2", w: 32, bmi2: true},
	"avx512":   {suffix: "AVX512", w: 64, bmi2: true},
	"vnni":     {suffix: "VNNI", w: 64, vnni: true, bmi2: true},
	"vnni256":  {suffix: "VNNI256", w: 32, vnni: true, bmi2: true},
}

func (t *target) zmm() bool { return t.w == 64 }

// evex reports whether every instruction may use the EVEX encoding, and so
// the allocator may hand out registers 16..31: the AVX-512 targets,
// 256-bit VNNI included.
func (t *target) evex() bool { return t.w == 64 || t.vnni }

// vec allocates a full-width vector register.
func (t *target) vec() VecVirtual {
	if t.zmm() {
		return ZMM()
	}
	return YMM()
}

func (t *target) and(src2, src1, dst Op) {
	if t.evex() {
		VPANDD(src2, src1, dst)
	} else {
		VPAND(src2, src1, dst)
	}
}

func (t *target) or(src2, src1, dst Op) {
	if t.evex() {
		VPORD(src2, src1, dst)
	} else {
		VPOR(src2, src1, dst)
	}
}

func (t *target) xor(src2, src1, dst Op) {
	if t.evex() {
		VPXORD(src2, src1, dst)
	} else {
		VPXOR(src2, src1, dst)
	}
}

func (t *target) zero(v Op) {
	if t.evex() {
		VPXORD(v, v, v)
	} else {
		VPXOR(v, v, v)
	}
}

// bcast16 fills every 128-bit lane of dst with the 16 bytes at m.
func (t *target) bcast16(m Mem, dst Op) {
	if t.evex() {
		VBROADCASTI32X4(m, dst)
	} else {
		VBROADCASTI128(m, dst)
	}
}

// load32 loads 32 bytes: into a ymm as is, or into both 256-bit halves of
// a zmm (so that per-half shift counts can pick two element runs at once).
func (t *target) load32(m Mem, dst Op) {
	switch {
	case t.zmm():
		VBROADCASTI64X4(m, dst)
	case t.evex():
		VMOVDQU64(m, dst)
	default:
		VMOVDQU(m, dst)
	}
}

// splat returns a full-width register holding the 32-bit pattern v in every
// dword, loaded from a 4-byte constant.
func (t *target) splat(v uint32) VecVirtual {
	r := t.vec()
	VPBROADCASTD(constU32(v), r)
	return r
}

// dotw adds the pairwise int16 products of p and s into the int32 lanes of
// acc: VPDPWSSD with VNNI, VPMADDWD+VPADDD otherwise.
func (t *target) dotw(p, s, acc Op) {
	if t.vnni {
		vnniOp("VPDPWSSD", s, p, acc)
		return
	}
	VPMADDWD(s, p, p)
	VPADDD(p, acc, acc)
}

// vnniOp emits a VNNI instruction, which avo's instruction table (v0.5.0)
// predates; the Go assembler knows it. Operands in Go order: src2, src1, acc.
func vnniOp(op string, src2, src1, acc Op) {
	Instruction(&ir.Instruction{
		Opcode:   op,
		Operands: []Op{src2, src1, acc},
		Inputs:   []Op{src2, src1, acc},
		Outputs:  []Op{acc},
		ISA:      []string{"AVX512_VNNI"},
	})
}

// hsum reduces the float32 lanes of v (ymm or zmm) into the low lane of
// the returned xmm.
func (t *target) hsum(v VecVirtual) VecVirtual {
	y := v
	if t.zmm() {
		hi := YMM()
		VEXTRACTF64X4(U8(1), v, hi)
		y = YMM()
		VADDPS(hi, v.AsY(), y)
	}
	return t.hsumY(y)
}

func (t *target) hsumY(y VecVirtual) VecVirtual {
	x := t.highHalfY(y)
	s := XMM()
	VADDPS(x, y.AsX(), s)
	h := XMM()
	VMOVHLPS(s, s, h)
	VADDPS(h, s, s)
	VMOVSHDUP(s, h)
	VADDSS(h, s, s)
	return s
}

var constCache = map[string]Mem{}

// constData returns a read-only global holding b, shared by every function
// of the output file.
func constData(name string, b []byte) Mem {
	if m, ok := constCache[name]; ok {
		return m
	}
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	m := GLOBL(name, RODATA|NOPTR)
	for i := 0; i < len(b); i += 4 {
		DATA(i, U32(uint32(b[i])|uint32(b[i+1])<<8|uint32(b[i+2])<<16|uint32(b[i+3])<<24))
	}
	constCache[name] = m
	return m
}

func constU32(v uint32) Mem {
	return constData(fmt.Sprintf("c32_%08x", v), []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
}

// scaleIndex is the VPSHUFB control that turns a register holding a
// block's 8-bit scales (the same 16 bytes in every 128-bit lane) into the
// zero-extended 16-bit scale of each 16-element lane, for every vector of
// a 256-element block. sub is the number of elements per scale (16 or 32).
// Vector i of the block is at offset i*t.w.
func (t *target) scaleIndex(sub int) Mem {
	var b []byte
	for off := 0; off < 256; off += 16 {
		s := byte(off / sub)
		for k := 0; k < 8; k++ {
			b = append(b, s, 0x80)
		}
	}
	return constData(fmt.Sprintf("scidx%d", sub), b)
}

// shiftCounts is a per-256-bit-half word shift count vector for VPSRLVW /
// VPSLLVW: lo in the low half, hi in the high half.
func shiftCounts(lo, hi uint16) Mem {
	var b []byte
	for i := 0; i < 32; i++ {
		c := lo
		if i >= 16 {
			c = hi
		}
		b = append(b, byte(c), byte(c>>8))
	}
	return constData(fmt.Sprintf("shift_%d_%d", lo, hi), b)
}

// shiftBits shifts every 16-bit word of src left (n > 0) or right (n < 0),
// writing dst; a zero shift is a copy when src != dst.
func (t *target) shiftBits(n int, src, dst Op) {
	switch {
	case n > 0:
		VPSLLW(U8(n), src, dst)
	case n < 0:
		VPSRLW(U8(-n), src, dst)
	default:
		if src != dst {
			t.copyv(src, dst)
		}
	}
}

// vshift shifts the two 256-bit halves of a zmm by their own counts (left
// for positive, right for negative; both must have the same sign or be 0).
func vshift(lo, hi int, src, dst Op) {
	switch {
	case lo >= 0 && hi >= 0 && (lo > 0 || hi > 0):
		VPSLLVW(shiftCounts(uint16(lo), uint16(hi)), src, dst)
	case lo <= 0 && hi <= 0:
		VPSRLVW(shiftCounts(uint16(-lo), uint16(-hi)), src, dst)
	default:
		panic("vshift: mixed directions")
	}
}

// konst returns a loop-invariant constant with v in every dword: a
// register, or with t.memConsts a 32-byte memory operand (the four-row
// 256-bit kernels need all 16 registers; a single row is faster with its
// constants in registers, since loads are what its loop runs out of).
func (t *target) konst(v uint32) Op {
	if t.memConsts && !t.evex() {
		return constVec(v)
	}
	return t.splat(v)
}

func asY(o Op) Op {
	if v, ok := o.(VecVirtual); ok {
		return v.AsY()
	}
	return o
}

// copyv copies a vector register.
func (t *target) copyv(src, dst Op) {
	if t.evex() {
		VMOVDQA64(src, dst)
	} else {
		VMOVDQA(src, dst)
	}
}

// zerof zeroes a float accumulator (VXORPS has no EVEX form without DQ).
func (t *target) zerof(v Op) { t.zero(v) }
