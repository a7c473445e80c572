package ops

import "math"

// ConvStep runs ggml_ssm_conv with SiLU for n tokens of c channels:
// each channel's last k-1 inputs (state, c rows of k-1) are prepended to
// x (n rows of c), out[t][ch] = silu(Σ_i window[t+i]·w[ch][i]), and the
// state keeps the last k-1 inputs. out may not alias x.
func ConvStep(state, x, w, out []float32, n, c, k int) {
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
				s += win[t+i] * wc[i]
			}
			out[t*c+ch] = s
		}
		copy(st, win[n:])
	}
	for t := 0; t < n; t++ {
		SiLURow(out[t*c : (t+1)*c])
	}
}

// DeltaRule holds the shapes of a gated delta rule: h heads whose keys,
// values and queries have s elements. With KDA the decay gate has one value
// per key channel (g is n×h×s); otherwise one per head (n×h).
type DeltaRule struct {
	Heads, Dim int
	KDA        bool
}

// Run advances the recurrent state over n tokens, one token at a time, as
// ggml's CPU gated_delta_net does for both decode and prefill:
//
//	S ← diag(exp g)·S;  S ← S + k·(β(v − Sᵀk))ᵀ;  o = Sᵀq / √s
//
// state is h matrices of s×s stored transposed (state[j*s+i] = S[i][j]),
// q and k are already L2-normalised, out gets n×h×s. Heads run in parallel.
func (d DeltaRule) Run(p *Pool, state, q, k, v, g, beta, out []float32, n int) {
	h, s := d.Heads, d.Dim
	scale := 1 / float32(math.Sqrt(float64(s)))
	p.For(h, 1, func(lo, hi int) {
		decay := make([]float32, s)
		delta := make([]float32, s)
		for head := lo; head < hi; head++ {
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
					delta[j] = (vt[j] - dotF32(st[j*s:(j+1)*s], kt)) * b
				}
				for j := 0; j < s; j++ {
					row, dj := st[j*s:(j+1)*s], delta[j]
					for i := range row {
						row[i] += kt[i] * dj
					}
				}
				o := out[off : off+s]
				for j := 0; j < s; j++ {
					o[j] = dotF32(st[j*s:(j+1)*s], qt) * scale
				}
			}
		}
	})
}
