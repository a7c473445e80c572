package ops

import "math"

// ConvStep runs ggml_ssm_conv with SiLU for n tokens of c channels:
// each channel's last k-1 inputs (state, c rows of k-1) are prepended to
// x (n rows of c), out[t][ch] = silu(Σ_i window[t+i]·w[ch][i]), and the
// state keeps the last k-1 inputs. out may not alias x.
func ConvStep(state, x, w, out []float32, n, c, k int) {
	if n == 1 && k >= 2 {
		convStep1(state, x, w, out, c, k)
		return
	}
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

// convStep1 is ConvStep for one token (decode), without a window copy.
func convStep1(state, x, w, out []float32, c, k int) {
	m := k - 1
	state, x, w, out = state[:c*m], x[:c], w[:c*k], out[:c]
	if k == 4 { // the models' kernel, unrolled
		for ch, xc := range x {
			st, wc := state[ch*3:][:3], w[ch*4:][:4]
			s0, s1, s2 := st[0], st[1], st[2]
			var s float32
			s += float32(s0 * wc[0])
			s += float32(s1 * wc[1])
			s += float32(s2 * wc[2])
			s += float32(xc * wc[3])
			out[ch] = s
			st[0], st[1], st[2] = s1, s2, xc
		}
		SiLURow(out)
		return
	}
	for ch, xc := range x {
		st, wc := state[ch*m:][:m], w[ch*k:][:k]
		var s float32
		for i, v := range st {
			s += float32(v * wc[i])
		}
		s += float32(xc * wc[m])
		out[ch] = s
		for i := 1; i < m; i++ {
			st[i-1] = st[i]
		}
		st[m-1] = xc
	}
	SiLURow(out)
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
//
// Every step reads and writes row j of the stored state alone, so a row is
// decayed and dotted with k in one pass and updated and dotted with q in a
// second; four rows go side by side so that their sequential float64 sums
// (ggml_vec_dot_f32's) overlap. out may not alias q.
func (d DeltaRule) Run(p *Pool, state, q, k, v, g, beta, out []float32, n int) {
	h, s := d.Heads, d.Dim
	scale := 1 / float32(math.Sqrt(float64(s)))
	p.For(h, 1, func(lo, hi int) {
		decay := make([]float32, s)
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
				} else {
					e := Exp(g[t*h+head])
					for i := range decay {
						decay[i] = e
					}
				}
				o := out[off : off+s]
				j := 0
				for ; j+8 <= s; j += 8 {
					deltaRows8(st[j*s:(j+8)*s], decay, qt, kt, vt[j:j+8], o[j:j+8], b, scale)
				}
				for ; j+4 <= s; j += 4 {
					deltaRows4(st[j*s:(j+4)*s], decay, qt, kt, vt[j:j+4], o[j:j+4], b, scale)
				}
				for ; j < s; j++ {
					deltaRow(st[j*s:(j+1)*s], decay, qt, kt, vt[j], &o[j], b, scale)
				}
			}
		}
	})
}

// deltaRows8 is deltaRows4 for eight rows (assembly where the CPU has AVX).
var deltaRows8 = deltaRows8Go

func deltaRows8Go(rows, decay, q, k, v, o []float32, b, scale float32) {
	n := len(decay)
	deltaRows4(rows[:4*n], decay, q, k, v[:4], o[:4], b, scale)
	deltaRows4(rows[4*n:8*n], decay, q, k, v[4:8], o[4:8], b, scale)
}

// deltaRow is one token's step for row j of the stored state.
func deltaRow(row, decay, q, k []float32, v float32, o *float32, b, scale float32) {
	n := len(row)
	decay, q, k = decay[:n], q[:n], k[:n]
	var sk float64
	for i := range row {
		row[i] *= decay[i]
		sk += float64(float32(row[i] * k[i]))
	}
	dj := (v - float32(sk)) * b
	var sq float64
	for i := range row {
		row[i] += float32(k[i] * dj)
		sq += float64(float32(row[i] * q[i]))
	}
	*o = float32(sq) * scale
}

// deltaRows4 is deltaRow for four consecutive rows (rows holds them).
func deltaRows4(rows, decay, q, k, v, o []float32, b, scale float32) {
	n := len(decay)
	r0, r1, r2, r3 := rows[:n], rows[n:2*n], rows[2*n:3*n], rows[3*n:4*n]
	q, k, v, o = q[:n], k[:n], v[:4], o[:4]
	var s0, s1, s2, s3 float64
	for i, e := range decay {
		ki := k[i]
		a0, a1, a2, a3 := r0[i]*e, r1[i]*e, r2[i]*e, r3[i]*e
		r0[i], r1[i], r2[i], r3[i] = a0, a1, a2, a3
		s0 += float64(float32(a0 * ki))
		s1 += float64(float32(a1 * ki))
		s2 += float64(float32(a2 * ki))
		s3 += float64(float32(a3 * ki))
	}
	d0 := (v[0] - float32(s0)) * b
	d1 := (v[1] - float32(s1)) * b
	d2 := (v[2] - float32(s2)) * b
	d3 := (v[3] - float32(s3)) * b
	s0, s1, s2, s3 = 0, 0, 0, 0
	for i, ki := range k {
		qi := q[i]
		a0 := r0[i] + float32(ki*d0)
		a1 := r1[i] + float32(ki*d1)
		a2 := r2[i] + float32(ki*d2)
		a3 := r3[i] + float32(ki*d3)
		r0[i], r1[i], r2[i], r3[i] = a0, a1, a2, a3
		s0 += float64(float32(a0 * qi))
		s1 += float64(float32(a1 * qi))
		s2 += float64(float32(a2 * qi))
		s3 += float64(float32(a3 * qi))
	}
	o[0] = float32(s0) * scale
	o[1] = float32(s1) * scale
	o[2] = float32(s2) * scale
	o[3] = float32(s3) * scale
}
