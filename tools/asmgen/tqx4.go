package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The TQ1_0 and TQ2_0 four-row kernels, dotTQ1_0x4<suffix> and
// dotTQ2_0x4<suffix>(w, a *byte, nb, astride int, out *float32): one
// weight row against four Q8_K rows a + k*astride, out[k] bit for bit the
// one-row kernel's (tq.go) on row k. A block's trits are unpacked once for
// the four rows (TQ1_0's base-3 unpacking is most of its one-row work);
// each row keeps its own integer accumulator, the four are reduced
// together by one transpose-add, and lane k of one xmm carries row k's
// float chain, sumf += float(sumi)*(d*d8), the reference's per block.
//
// Both types' unpacked codes are eight runs of 32 trits (as unsigned
// bytes) whose activations are the block's 32-byte runs in order, so run
// i multiplies the quants at 4+32i. TQ2_0: run 4c+l is bits 2l of qs[32c:
// 32c+32]. TQ1_0: runs 0..4 are trit n of qs[0:32]; runs 5 and 6 trits
// 0,1 and 2,3 of qs[32:48] side by side; run 7 trit 4 of qs[32:48] beside
// the sixteen qh trits (tq.go's spread). The 512-bit kernels put two runs
// in a zmm where that costs no extra unpacking.

// tqRun is an unpacked run (or two, in a zmm) and where its activations
// start in a Q8_K block.
type tqRun struct {
	codes VecVirtual
	off   int
}

// tqX4 emits dot<name>x4<suffix> around runs, which unpacks one block's
// codes at w and passes each run (or pair of runs) to use as soon as it
// is made, so that few are live at once.
func tqX4(t *target, name string, wsize, doff int, pre func(k *tqk), runs func(k *tqk, w Mem, use func(tqRun))) {
	fn := "dot" + name + "x4" + t.suffix
	TEXT(fn, NOSPLIT, "func(w, a *byte, nb, astride int, out *float32)")
	Pragma("noescape")
	wp := Load(Param("w"), GP64())
	ap := Load(Param("a"), GP64())
	nb := Load(Param("nb"), GP64())
	s := Load(Param("astride"), GP64())
	s3 := GP64()
	LEAQ(Mem{Base: s, Index: s, Scale: 2}, s3)
	acts := []Mem{{Base: ap}, {Base: ap, Index: s, Scale: 1}, {Base: ap, Index: s, Scale: 2}, {Base: ap, Index: s3, Scale: 1}}
	k := &tqk{t: t, c03: YMM(), ones16: YMM()}
	VPBROADCASTD(constU32(0x03030303), k.c03)
	VPBROADCASTD(constU32(0x00010001), k.ones16)
	if t.zmm() {
		k.c03z = ZMM()
		VPBROADCASTD(constU32(0x03030303), k.c03z)
	}
	pre(k)
	sum := XMM()
	VXORPS(sum, sum, sum)
	TESTQ(nb, nb)
	JZ(LabelRef("done" + fn))
	Label("loop" + fn)
	// accY: 256-bit runs; accZ: 512-bit ones (folded in at the end).
	var accY, accZ [4]VecVirtual
	for r := range accY {
		accY[r] = YMM()
		t.zero(accY[r])
	}
	runs(k, Mem{Base: wp}, func(run tqRun) {
		wide := run.codes.Size() == 64
		for r, a := range acts {
			acc := accY[r]
			if wide {
				if accZ[r] == nil {
					accZ[r] = ZMM()
					t.zero(accZ[r])
				}
				acc = accZ[r]
			}
			av := YMM()
			if wide {
				av = ZMM()
			}
			t.mov(a.Offset(4+run.off), av)
			if t.vnni {
				vnniOp("VPDPBUSD", av, run.codes, acc)
				continue
			}
			// Pair sums <= 2*128*3; at most eight runs add into a word.
			VPMADDUBSW(av, run.codes, av)
			VPADDW(av, acc, acc)
		}
	})
	var is [4]VecVirtual
	for r, a := range acts {
		acc := accY[r]
		if accZ[r] != nil {
			hi := YMM()
			VEXTRACTI64X4(U8(1), accZ[r], hi)
			if t.vnni {
				VPADDD(hi, accZ[r].AsY(), hi)
				VPADDD(hi, acc, acc)
			} else {
				VPADDW(hi, accZ[r].AsY(), hi)
				VPADDW(hi, acc, acc)
			}
		}
		if !t.vnni {
			VPMADDWD(k.ones16, acc, acc)
		}
		b := YMM()
		VPMADDWD(a.Offset(4+256), k.ones16, b) // the bsums: sum(a) of the run pairs
		VPSUBD(b, acc, acc)
		is[r] = acc
	}
	f := t.fold128(t.quadSum(t.pairSum(is[0], is[1]), t.pairSum(is[2], is[3])))
	VCVTDQ2PS(f, f)
	d8 := XMM()
	VMOVSS(acts[0], d8)
	for r := 1; r < 4; r++ {
		VINSERTPS(U8(r<<4), acts[r], d8, d8)
	}
	d := XMM()
	VPBROADCASTW(Mem{Base: wp, Disp: doff}, d)
	VCVTPH2PS(d, d)
	VMULPS(d8, d, d) // d*d8 of each row, as the one-row kernel's VMULSS
	VMULPS(d, f, f)
	VADDPS(f, sum, sum)
	ADDQ(U32(wsize), wp)
	ADDQ(U32(q8KSize), ap)
	DECQ(nb)
	JNZ(LabelRef("loop" + fn))
	Label("done" + fn)
	outp := Load(Param("out"), GP64())
	VMOVUPS(sum, Mem{Base: outp})
	VZEROUPPER()
	RET()
}

// genTQ2x4 emits dotTQ2_0x4<suffix>.
func genTQ2x4(t *target) {
	tqX4(t, "TQ2_0", tq2Size, 64, func(*tqk) {}, genTQ2Runs)
}

// laneWords is a constant of 16-bit words, lane i (laneBytes bytes) all
// words[i].
func laneWords(name string, words []int, laneBytes int) Mem {
	var b []byte
	for _, w := range words {
		for i := 0; i < laneBytes; i += 2 {
			b = append(b, byte(w), byte(w>>8))
		}
	}
	return constData(name, b)
}

// genTQ1x4 emits dotTQ1_0x4<suffix>.
func genTQ1x4(t *target) {
	var spread, qhMul []byte
	for n := 0; n < 4; n++ {
		for j := 0; j < 4; j++ {
			spread = append(spread, byte(10+j)) // loaded from byte 38: qh[j] is byte 10+j
		}
		qhMul = append(qhMul, byte([]int{1, 3, 9, 27}[n]), 0, byte([]int{1, 3, 9, 27}[n]), 0)
	}
	tqX4(t, "TQ1_0", tq1Size, 52, func(k *tqk) {
		k.hiByte, k.three = YMM(), YMM()
		VPBROADCASTD(constU32(0xff00ff00), k.hiByte)
		VPBROADCASTD(constU32(0x00030003), k.three)
		if t.zmm() {
			k.hiByteZ, k.threeZ = ZMM(), ZMM()
			VPBROADCASTD(constU32(0xff00ff00), k.hiByteZ)
			VPBROADCASTD(constU32(0x00030003), k.threeZ)
		}
	}, func(k *tqk, w Mem, use func(tqRun)) {
		pow3 := []int{1, 3, 9, 27, 81}
		if t.zmm() {
			q := ZMM()
			VBROADCASTI64X4(w, q)
			use(tqRun{k.tritsW(q, laneWords("tq1m01", []int{1, 3}, 32), 64), 0})
			use(tqRun{k.tritsW(q, laneWords("tq1m23", []int{9, 27}, 32), 64), 64})
			use(tqRun{k.tritsW(q.AsY().(VecVirtual), constVec(81*0x00010001), 32), 128})
			h := ZMM()
			VBROADCASTI32X4(w.Offset(32), h)
			use(tqRun{k.tritsW(h, laneWords("tq1h0123", []int{1, 3, 9, 27}, 16), 64), 160})
		} else {
			q := YMM()
			t.mov(w, q)
			for n := 0; n < 5; n++ {
				var mul Op
				if n > 0 {
					mul = constVec(uint32(pow3[n]) * 0x00010001)
				}
				use(tqRun{k.tritsW(q, mul, 32), 32 * n})
			}
			h := YMM()
			t.bcast16(w.Offset(32), h)
			use(tqRun{k.tritsW(h, laneWords("tq1y01", []int{1, 3}, 16), 32), 160})
			use(tqRun{k.tritsW(h, laneWords("tq1y23", []int{9, 27}, 16), 32), 192})
		}
		// Trit 4 of qs[32:48] beside the qh trits.
		h, sp, y := XMM(), XMM(), YMM()
		t.mov(w.Offset(32), h)
		t.mov(w.Offset(38), sp) // bytes 38..53: the block's last 16
		VPSHUFB(constData("tq1qhspread", spread), sp, sp)
		if t.evex() {
			VINSERTI32X4(U8(1), sp, h.AsY(), y)
		} else {
			VINSERTI128(U8(1), sp, h.AsY(), y)
		}
		var mb []byte
		for i := 0; i < 16; i += 2 {
			mb = append(mb, 81, 0)
		}
		mb = append(mb, qhMul...)
		use(tqRun{k.tritsW(y, constData("tq1m4qh", mb), 32), 224})
	})
}

// tqHalfShift is VPSRLVQ's count for TQ2_0's pairs of runs: 0 for the
// quadwords of a zmm's low half, 2 for the high half's.
func tqHalfShift() Mem {
	b := make([]byte, 64)
	for i := 32; i < 64; i += 8 {
		b[i] = 2
	}
	return constData("tq2halfshift", b)
}
