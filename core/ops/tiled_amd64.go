//go:build !noasm

package ops

import "github.com/klauspost/cpuid/v2"

// tileScoresAVX is tileScoresGo: eight ymm accumulators hold the 64
// scores, and each step multiplies a broadcast q value by a row of kt and
// adds, so every score is its own sequential float32 sum.
//
//go:noescape
func tileScoresAVX(q *float32, kt *float32, dk int, out *[flashTileKV]float32)

// tileAccum32AVX is tileAccumGo on groups*32 elements of acc, 32 at a
// time (four ymm accumulators), tk in order.
//
//go:noescape
func tileAccum32AVX(acc *float32, w *float32, n int, v *float32, stride int, groups int)

// widenHalf8F16C is widenHalfGo on n (a multiple of 8) values.
//
//go:noescape
func widenHalf8F16C(dst *float32, src *uint16, n int)

func init() {
	if cpuid.CPU.Supports(cpuid.AVX) {
		tileScores = tileScoresAsm
		tileAccum = tileAccumAsm
	}
	if cpuid.CPU.Supports(cpuid.AVX, cpuid.F16C) {
		widenHalf = widenHalfAsm
	}
}

func tileScoresAsm(q, kt []float32, out *[flashTileKV]float32) {
	if len(q) == 0 {
		*out = [flashTileKV]float32{}
		return
	}
	kt = kt[:len(q)*flashTileKV]
	tileScoresAVX(&q[0], &kt[0], len(q), out)
}

func tileAccumAsm(acc, w, v []float32, stride int) {
	if len(w) == 0 {
		return
	}
	g := len(acc) / 32
	if g > 0 {
		_ = v[(len(w)-1)*stride+g*32-1] // bounds of every row's part
		tileAccum32AVX(&acc[0], &w[0], len(w), &v[0], stride, g)
	}
	if g*32 < len(acc) {
		tileAccumGo(acc[g*32:], w, v[g*32:], stride)
	}
}

func widenHalfAsm(dst []float32, src []uint16) {
	src = src[:len(dst)]
	n := len(dst) &^ 7
	if n > 0 {
		widenHalf8F16C(&dst[0], &src[0], n)
	}
	if n < len(dst) {
		widenHalfGo(dst[n:], src[n:])
	}
}
