package ops

import (
	"math"
	"sync"

	"github.com/k3-inference/k3/core/quant"
)

// HalfKV is an attention cache in IEEE half precision, as llama.cpp keeps
// its KV cache (type_k = type_v = F16 by default). Row p holds position
// p: its key at [KOff, KOff+DK) and its value at [VOff, VOff+DV). MLA's
// absorbed form shares one row between K and V (V is the key's first DV
// values), so the two ranges may overlap.
type HalfKV struct {
	Data     []uint16
	Stride   int
	KOff, DK int
	VOff, DV int
}

// PutHalf stores x rounded to half at dst.
func PutHalf(dst []uint16, x []float32) {
	for i, v := range x {
		dst[i] = quant.FP32ToFP16(v)
	}
}

// FlashTileQ is the number of queries from which ggml's CPU flash attention
// switches from its one-query kernel (half-precision accumulator) to its
// tiled kernel (float32 throughout).
const FlashTileQ = 64

const flashTileKV = 64

var negInf = float32(math.Inf(-1))

// AttendHalf is ggml's one-query flash attention kernel
// (flash_attn_ext_f16_one_chunk) over cache rows [0, n): q is rounded to
// half, scores are half dot products, and the weighted sum of values is
// accumulated in half with an online softmax. out gets DV values.
func AttendHalf(q []float32, kv HalfKV, n int, scale float32, out []float32) {
	_, S := attendHalfRange(q, kv, 0, n, scale, out)
	inv := float32(0)
	if S != 0 {
		inv = 1 / S
	}
	for d := range out[:kv.DV] {
		out[d] *= inv
	}
}

// attendHalfRange runs the one-query kernel over rows [lo, hi) and returns
// the running max and sum with the unnormalised values (widened from the
// half accumulator) in out.
//
// The accumulator lives in out as float32 values that are all halves
// (RoundFP16 after every step is FP32ToFP16 then FP16ToFP32). The scores of
// attnRows rows are computed together: each keeps its own sequential
// float64 sum, as ggml_vec_dot_f16 does, and the independent sums overlap.
func attendHalfRange(q []float32, kv HalfKV, lo, hi int, scale float32, out []float32) (M, S float32) {
	dk := kv.DK
	sp := getFloats(dk)
	qf := (*sp)[:dk]
	for i, x := range q[:dk] {
		qf[i] = quant.RoundFP16(x)
	}
	acc := out[:kv.DV]
	clear(acc)
	M = negInf
	var sc [attnRows]float64
	for ic := lo; ic < hi; ic += attnRows {
		nr := min(attnRows, hi-ic)
		if nr == attnRows {
			sc = dotHalf8(kv, ic, qf)
		} else {
			r := 0
			for ; r+4 <= nr; r += 4 {
				s4 := dotHalf4(kv, ic+r, qf)
				copy(sc[r:r+4], s4[:])
			}
			for ; r < nr; r++ {
				sc[r] = dotHalf(kv.Data[(ic+r)*kv.Stride+kv.KOff:][:dk], qf)
			}
		}
		for r := range nr {
			s := float32(sc[r]) * scale
			ms, vs := float32(1), float32(1)
			if s > M {
				Mold := M
				M = s
				ms = Exp(Mold - M)
			} else {
				vs = Exp(s - M)
			}
			halfAcc(acc, kv.Data[(ic+r)*kv.Stride+kv.VOff:][:len(acc)], ms, vs)
			S = S*ms + vs
		}
	}
	putFloats(sp)
	return M, S
}

// attnRows is how many cache rows' scores are summed side by side.
const attnRows = 8

// dotHalf8 is dotHalf of rows ic..ic+7 of kv's keys (assembly where the CPU
// has F16C).
var dotHalf8 = dotHalf8Go

func dotHalf8Go(kv HalfKV, ic int, q []float32) (s [attnRows]float64) {
	a, b := dotHalf4(kv, ic, q), dotHalf4(kv, ic+4, q)
	copy(s[:4], a[:])
	copy(s[4:], b[:])
	return s
}

// dotHalf is ggml_vec_dot_f16 of a half row with q (already rounded to
// half): float32 products summed in float64, in order.
func dotHalf(k []uint16, q []float32) float64 {
	q = q[:len(k)]
	var s float64
	for i, h := range k {
		s += float64(quant.FP16ToFP32(h) * q[i])
	}
	return s
}

// dotHalf4 is dotHalf of rows ic..ic+3 of kv's keys.
func dotHalf4(kv HalfKV, ic int, q []float32) (s [4]float64) {
	n, st := kv.DK, kv.Stride
	base := ic*st + kv.KOff
	k0 := kv.Data[base:][:n]
	k1 := kv.Data[base+st:][:n]
	k2 := kv.Data[base+2*st:][:n]
	k3 := kv.Data[base+3*st:][:n]
	q = q[:n]
	var s0, s1, s2, s3 float64
	for i, x := range q {
		s0 += float64(quant.FP16ToFP32(k0[i]) * x)
		s1 += float64(quant.FP16ToFP32(k1[i]) * x)
		s2 += float64(quant.FP16ToFP32(k2[i]) * x)
		s3 += float64(quant.FP16ToFP32(k3[i]) * x)
	}
	return [4]float64{s0, s1, s2, s3}
}

// floatsPool recycles the per-call scratch of the attention kernels, which
// run once per head and token from short-lived pool goroutines.
var floatsPool = sync.Pool{New: func() any { return new([]float32) }}

func getFloats(n int) *[]float32 {
	p := floatsPool.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

func putFloats(p *[]float32) { floatsPool.Put(p) }

// AttendTiled is ggml's tiled flash attention kernel (used for batches of at
// least FlashTileQ queries) for one query over cache rows [0, n): q stays
// float32, keys and values are widened to float32, and the online softmax
// advances a tile of 64 positions at a time.
func AttendTiled(q []float32, kv HalfKV, n int, scale float32, out []float32) {
	acc := out[:kv.DV]
	clear(acc)
	var S float32
	M := float32(math.Inf(-1))
	var kq [flashTileKV]float32
	kp := getFloats(kv.DK)
	defer putFloats(kp)
	kf := *kp
	for ic := 0; ic < n; ic += flashTileKV {
		tile := min(flashTileKV, n-ic)
		tileMax := float32(math.Inf(-1))
		for tk := 0; tk < tile; tk++ {
			row := kv.Data[(ic+tk)*kv.Stride:]
			for i, h := range row[kv.KOff : kv.KOff+kv.DK] {
				kf[i] = quant.FP16ToFP32(h)
			}
			var s float32
			for i, x := range q[:kv.DK] {
				s += x * kf[i]
			}
			kq[tk] = s * scale
			tileMax = max(tileMax, kq[tk])
		}
		Mnew := max(M, tileMax)
		if Mnew > M {
			ms := Exp(M - Mnew)
			for d := range acc {
				acc[d] *= ms
			}
			S *= ms
		}
		M = Mnew
		for tk := tile; tk < flashTileKV; tk++ {
			kq[tk] = negInf
		}
		sum := expSum(kq[:], kq[:], Mnew)
		S = float32(float64(S) + sum)
		for tk := 0; tk < tile; tk++ {
			row := kv.Data[(ic+tk)*kv.Stride:]
			w := kq[tk]
			for d, h := range row[kv.VOff : kv.VOff+kv.DV] {
				acc[d] += w * quant.FP16ToFP32(h)
			}
		}
	}
	inv := float32(0)
	if S != 0 {
		inv = 1 / S
	}
	for d := range acc {
		acc[d] *= inv
	}
}

// AttendHalfSplit is ggml's decode path for caches of 512 or more rows
// (flash_attn_ext with one query and F16 K/V): the nkv cache rows are cut
// into nth equal chunks, one per thread, each chunk runs AttendHalf's
// kernel on the rows of [0, visible) it holds, and the partial results are
// merged in float32. The result depends on nth, as llama.cpp's does on its
// thread count.
func AttendHalfSplit(q []float32, kv HalfKV, visible, nkv, nth int, scale float32, out []float32) {
	chunk := (nkv + nth - 1) / nth
	acc := out[:kv.DV]
	clear(acc)
	Mf := negInf
	var Sf float32
	pp := getFloats(kv.DV)
	defer putFloats(pp)
	part := *pp
	for c := 0; c < nth; c++ {
		lo, hi := c*chunk, min((c+1)*chunk, nkv, visible)
		if lo >= hi {
			continue // an empty chunk contributes S = 0
		}
		M, S := attendHalfRange(q, kv, lo, hi, scale, part)
		if S == 0 {
			continue
		}
		Mn := max(Mf, M)
		so, sn := Exp(Mf-Mn), Exp(M-Mn)
		for d := range acc {
			acc[d] = acc[d]*so + part[d]*sn
		}
		Sf = Sf*so + S*sn
		Mf = Mn
	}
	if Sf != 0 {
		inv := 1 / Sf
		for d := range acc {
			acc[d] *= inv
		}
	}
}
