package ops

import (
	"math"

	"github.com/k3-inference/k3/core/quant"
)

// The ops as they were written before they were made faster, kept as the
// definition the fast versions must match bit for bit (each of these is
// itself checked against llama.cpp's reference build by the model's
// parity tests).

func putHalfRef(dst []uint16, x []float32) {
	for i, v := range x {
		dst[i] = quant.FP32ToFP16(v)
	}
}

func attendHalfRef(q []float32, kv HalfKV, n int, scale float32, out []float32) {
	_, S := attendHalfRangeRef(q, kv, 0, n, scale, out)
	inv := float32(0)
	if S != 0 {
		inv = 1 / S
	}
	for d := range out[:kv.DV] {
		out[d] *= inv
	}
}

func attendHalfRangeRef(q []float32, kv HalfKV, lo, hi int, scale float32, out []float32) (M, S float32) {
	qh := make([]uint16, kv.DK)
	putHalfRef(qh, q[:kv.DK])
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
			acc[d] = quant.FP32ToFP16(quant.FP16ToFP32(acc[d]) + float32(quant.FP16ToFP32(v[d])*vs))
		}
		S = S*ms + vs
	}
	for d := range acc {
		out[d] = quant.FP16ToFP32(acc[d])
	}
	return M, S
}

func attendTiledRef(q []float32, kv HalfKV, n int, scale float32, out []float32) {
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
				s += float32(x * kf[i])
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
				acc[d] += float32(w * quant.FP16ToFP32(h))
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

func attendHalfSplitRef(q []float32, kv HalfKV, visible, nkv, nth int, scale float32, out []float32) {
	chunk := (nkv + nth - 1) / nth
	acc := out[:kv.DV]
	clear(acc)
	Mf := negInf
	var Sf float32
	part := make([]float32, kv.DV)
	for c := 0; c < nth; c++ {
		lo, hi := c*chunk, min((c+1)*chunk, nkv, visible)
		if lo >= hi {
			continue
		}
		M, S := attendHalfRangeRef(q, kv, lo, hi, scale, part)
		if S == 0 {
			continue
		}
		Mn := max(Mf, M)
		so, sn := Exp(Mf-Mn), Exp(M-Mn)
		for d := range acc {
			acc[d] = float32(acc[d]*so) + float32(part[d]*sn)
		}
		Sf = float32(Sf*so) + float32(S*sn)
		Mf = Mn
	}
	if Sf != 0 {
		inv := 1 / Sf
		for d := range acc {
			acc[d] *= inv
		}
	}
}

func dotF32Ref(x, y []float32) float32 {
	y = y[:len(x)]
	var s float64
	for i, v := range x {
		s += float64(float32(v * y[i]))
	}
	return float32(s)
}

func convStepRef(state, x, w, out []float32, n, c, k int) {
	win := make([]float32, k-1+n)
	for ch := 0; ch < c; ch++ {
		st := state[ch*(k-1) : (ch+1)*(k-1)]
		copy(win, st)
		for t := 0; t < n; t++ {
			win[k-1+t] = x[t*c+ch]
		}
		wc := w[ch*k : (ch+1)*k]
		for t := 0; t < n; t++ {
			var s float32
			for i := 0; i < k; i++ {
				s += float32(win[t+i] * wc[i])
			}
			out[t*c+ch] = s
		}
		copy(st, win[n:])
	}
	for t := 0; t < n; t++ {
		SiLURow(out[t*c : (t+1)*c])
	}
}

func deltaRunRef(d DeltaRule, state, q, k, v, g, beta, out []float32, n int) {
	h, s := d.Heads, d.Dim
	scale := 1 / float32(math.Sqrt(float64(s)))
	decay := make([]float32, s)
	delta := make([]float32, s)
	for head := 0; head < h; head++ {
		st := state[head*s*s : (head+1)*s*s]
		for t := 0; t < n; t++ {
			off := (t*h + head) * s
			qt, kt, vt := q[off:off+s], k[off:off+s], v[off:off+s]
			b := beta[t*h+head]
			if d.KDA {
				for i := range decay {
					decay[i] = Exp(g[off+i])
				}
				for j := 0; j < s; j++ {
					row := st[j*s : (j+1)*s]
					for i := range row {
						row[i] *= decay[i]
					}
				}
			} else {
				e := Exp(g[t*h+head])
				for i := range st {
					st[i] *= e
				}
			}
			for j := 0; j < s; j++ {
				delta[j] = (vt[j] - dotF32Ref(st[j*s:(j+1)*s], kt)) * b
			}
			for j := 0; j < s; j++ {
				row, dj := st[j*s:(j+1)*s], delta[j]
				for i := range row {
					row[i] += float32(kt[i] * dj)
				}
			}
			o := out[off : off+s]
			for j := 0; j < s; j++ {
				o[j] = dotF32Ref(st[j*s:(j+1)*s], qt) * scale
			}
		}
	}
}

func situRef(gate, up []float32, beta, lb float32) {
	for i, g := range gate {
		a := tanhfFrozen(g*(1/beta)) * beta
		a *= Sigmoid(g)
		u := up[i]
		if lb > 0 {
			u = tanhfFrozen(u*(1/lb)) * lb
		}
		gate[i] = a * u
	}
}
