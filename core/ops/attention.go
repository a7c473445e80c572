package ops

import (
	"math"

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
func attendHalfRange(q []float32, kv HalfKV, lo, hi int, scale float32, out []float32) (M, S float32) {
	qh := make([]uint16, kv.DK)
	PutHalf(qh, q[:kv.DK])
	acc := make([]uint16, kv.DV)
	M = negInf
	for ic := lo; ic < hi; ic++ {
		row := kv.Data[ic*kv.Stride:]
		k := row[kv.KOff : kv.KOff+kv.DK]
		var sum float64
		for i, kh := range k {
			sum += float64(quant.FP16ToFP32(kh) * quant.FP16ToFP32(qh[i]))
		}
		s := float32(sum) * scale
		ms, vs := float32(1), float32(1)
		if s > M {
			Mold := M
			M = s
			ms = Exp(Mold - M)
			for d := range acc {
				acc[d] = quant.FP32ToFP16(quant.FP16ToFP32(acc[d]) * ms)
			}
		} else {
			vs = Exp(s - M)
		}
		v := row[kv.VOff : kv.VOff+kv.DV]
		for d := range acc {
			acc[d] = quant.FP32ToFP16(quant.FP16ToFP32(acc[d]) + quant.FP16ToFP32(v[d])*vs)
		}
		S = S*ms + vs
	}
	for d := range acc {
		out[d] = quant.FP16ToFP32(acc[d])
	}
	return M, S
}

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
	kf := make([]float32, kv.DK)
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
	part := make([]float32, kv.DV)
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
