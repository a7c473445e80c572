package ops

import "math"

// RunChunked computes the same gated delta rule as Run, a chunk of tokens
// at a time in matrix form (the WY / chunkwise-parallel formulation that
// llama.cpp's build_delta_net_chunking uses when the fused op is not
// available). Within a chunk, with G_t the running sum of the decays and
// Γ_t = exp(G_t), the state updates u_t = β_t(v_t − (D_t S_{t−1})ᵀk_t)
// solve the unit lower-triangular system
//
//	u_t + β_t Σ_{s<t} A_ts u_s = β_t (v_t − S_0ᵀ(Γ_t ⊙ k_t)),  A_ts = Σ_i k_t[i] k_s[i] e^{G_t[i]−G_s[i]}
//
// after which outputs and the chunk's final state follow from S_0 and the
// u_s alone. It equals Run in exact arithmetic; in float32 it differs by
// rounding. Decays within a chunk are only ever exponentiated as
// differences G_t − G_s ≤ 0, so nothing overflows.
func (d DeltaRule) RunChunked(p *Pool, state, q, k, v, g, beta, out []float32, n, chunk int) {
	h, s := d.Heads, d.Dim
	scale := 1 / float32(math.Sqrt(float64(s)))
	chunk = max(chunk, 1)
	p.For(h, 1, func(lo, hi int) {
		G := make([]float32, chunk*s) // running decay sums
		U := make([]float32, chunk*s) // state updates u_t
		E := make([]float32, s)       // scratch: e^{G_t - G_s} per channel
		W := make([]float32, s)
		for head := lo; head < hi; head++ {
			st := state[head*s*s : (head+1)*s*s] // st[j*s+i] = S[i][j]
			for c0 := 0; c0 < n; c0 += chunk {
				m := min(chunk, n-c0)
				// G_t
				for t := 0; t < m; t++ {
					for i := 0; i < s; i++ {
						gi := d.gate(g, c0+t, head, i)
						if t > 0 {
							gi += G[(t-1)*s+i]
						}
						G[t*s+i] = gi
					}
				}
				off := func(t int) int { return ((c0+t)*h + head) * s }
				// forward substitution for u_t
				for t := 0; t < m; t++ {
					kt, vt := k[off(t):off(t)+s], v[off(t):off(t)+s]
					b := beta[(c0+t)*h+head]
					for i := 0; i < s; i++ {
						W[i] = Exp(G[t*s+i]) * kt[i]
					}
					u := U[t*s : (t+1)*s]
					for j := 0; j < s; j++ {
						u[j] = vt[j] - dotF32(st[j*s:(j+1)*s], W)
					}
					for sIdx := 0; sIdx < t; sIdx++ {
						ks := k[off(sIdx) : off(sIdx)+s]
						for i := 0; i < s; i++ {
							E[i] = Exp(G[t*s+i]-G[sIdx*s+i]) * ks[i]
						}
						a := dotF32(E, kt)
						us := U[sIdx*s : (sIdx+1)*s]
						for j := range u {
							u[j] -= a * us[j]
						}
					}
					for j := range u {
						u[j] *= b
					}
				}
				// outputs: o_t = S_0ᵀ(Γ_t⊙q_t) + Σ_{s≤t} u_s ((e^{G_t−G_s}⊙k_s)·q_t)
				for t := 0; t < m; t++ {
					qt := q[off(t) : off(t)+s]
					for i := 0; i < s; i++ {
						W[i] = Exp(G[t*s+i]) * qt[i]
					}
					o := out[off(t) : off(t)+s]
					for j := 0; j < s; j++ {
						o[j] = dotF32(st[j*s:(j+1)*s], W)
					}
					for sIdx := 0; sIdx <= t; sIdx++ {
						ks := k[off(sIdx) : off(sIdx)+s]
						for i := 0; i < s; i++ {
							E[i] = Exp(G[t*s+i]-G[sIdx*s+i]) * ks[i]
						}
						a := dotF32(E, qt)
						us := U[sIdx*s : (sIdx+1)*s]
						for j := range o {
							o[j] += a * us[j]
						}
					}
					for j := range o {
						o[j] *= scale
					}
				}
				// state at the chunk's end: S = Γ_m⊙S_0 + Σ_s (e^{G_m−G_s}⊙k_s) u_sᵀ
				last := G[(m-1)*s : m*s]
				for i := 0; i < s; i++ {
					W[i] = Exp(last[i])
				}
				for j := 0; j < s; j++ {
					row := st[j*s : (j+1)*s]
					for i := range row {
						row[i] *= W[i]
					}
				}
				for sIdx := 0; sIdx < m; sIdx++ {
					ks := k[off(sIdx) : off(sIdx)+s]
					for i := 0; i < s; i++ {
						E[i] = Exp(last[i]-G[sIdx*s+i]) * ks[i]
					}
					us := U[sIdx*s : (sIdx+1)*s]
					for j := 0; j < s; j++ {
						row, uj := st[j*s:(j+1)*s], us[j]
						for i := range row {
							row[i] += E[i] * uj
						}
					}
				}
			}
		}
	})
}

// gate is the decay of key channel i of head at token t.
func (d DeltaRule) gate(g []float32, t, head, i int) float32 {
	if d.KDA {
		return g[(t*d.Heads+head)*d.Dim+i]
	}
	return g[t*d.Heads+head]
}
