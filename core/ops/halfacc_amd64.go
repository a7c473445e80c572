//go:build !noasm

package ops

import (
	"github.com/k3-inference/k3/core/quant"
	"github.com/klauspost/cpuid/v2"
)

// halfAccF16C runs halfAccGo on the first n&^7 elements, eight at a time:
// VCVTPS2PH rounds to nearest even, keeps subnormals and overflows to Inf
// as FP32ToFP16 does; a NaN keeps part of its payload there, so NaN lanes
// are replaced by FP32ToFP16's quiet NaN with the same sign. The operands
// of each multiply and add are in the order Go's compiled loop has them,
// so that when two NaNs meet, the same one (and its sign) comes out.
//
//go:noescape
func halfAccF16C(acc *float32, v *uint16, n int, ms, vs float32)

// dotHalf8F16C adds to sums the dot products of q's first n (a multiple of
// 8) elements with eight half rows, stride elements apart from k: per row,
// float32 products summed in float64 in element order, as dotHalf.
//
//go:noescape
func dotHalf8F16C(k *uint16, stride int, q *float32, n int, sums *[8]float64)

// deltaRows8AVX is deltaRows8Go for s a multiple of 8.
//
//go:noescape
func deltaRows8AVX(rows *float32, s int, decay, k, q, v, o *float32, b, scale float32)

func init() {
	if cpuid.CPU.Supports(cpuid.AVX, cpuid.F16C) {
		halfAcc = halfAccAsm
		dotHalf8 = dotHalf8Asm
	}
	if cpuid.CPU.Supports(cpuid.AVX) {
		deltaRows8 = deltaRows8Asm
	}
}

func deltaRows8Asm(rows, decay, q, k, v, o []float32, b, scale float32) {
	s := len(decay)
	if s%8 != 0 {
		deltaRows8Go(rows, decay, q, k, v, o, b, scale)
		return
	}
	rows, q, k, v, o = rows[:8*s], q[:s], k[:s], v[:8], o[:8]
	deltaRows8AVX(&rows[0], s, &decay[0], &k[0], &q[0], &v[0], &o[0], b, scale)
}

func dotHalf8Asm(kv HalfKV, ic int, q []float32) (s [8]float64) {
	n, st := kv.DK, kv.Stride
	base := ic*st + kv.KOff
	rows := kv.Data[base : base+7*st+n] // bounds for all eight rows
	q = q[:n]
	m := n &^ 7
	if m > 0 {
		dotHalf8F16C(&rows[0], st, &q[0], m, &s)
	}
	for r := range s {
		row := rows[r*st:][:n]
		for i := m; i < n; i++ {
			s[r] += float64(quant.FP16ToFP32(row[i]) * q[i])
		}
	}
	return s
}

func halfAccAsm(acc []float32, v []uint16, ms, vs float32) {
	v = v[:len(acc)]
	n := len(acc) &^ 7
	if n > 0 {
		halfAccF16C(&acc[0], &v[0], n, ms, vs)
	}
	if n < len(acc) {
		halfAccGo(acc[n:], v[n:], ms, vs)
	}
}
