package ops

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

func maxDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

// TestMatMul checks each weight type against float64 sums of the
// dequantized weights times the dequantized (quantized) activations.
func TestMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols, n = 37, 512, 3
	wf := randVec(r, rows*cols)
	x := randVec(r, n*cols)
	p := NewPool(3)
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_0, quant.Q2_K, quant.Q4_K, quant.Q6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			vt := typ.VecDotType()
			if !quant.CanQuantize(typ) || !quant.CanVecDot(typ) || !quant.CanDequantize(typ) || !quant.CanDequantize(vt) {
				t.Skipf("%s not implemented in quant yet", typ)
			}
			rb, _ := quant.RowSize(typ, cols)
			data := make([]byte, rows*int(rb))
			if err := quant.Quantize(typ, wf, data); err != nil {
				t.Fatal(err)
			}
			wd := make([]float32, rows*cols)
			if err := quant.Dequantize(typ, data, wd); err != nil {
				t.Fatal(err)
			}
			ab, _ := quant.RowSize(vt, cols)
			xd := make([]float32, n*cols)
			for tok := 0; tok < n; tok++ {
				qa := make([]byte, ab)
				if err := quant.Quantize(vt, x[tok*cols:(tok+1)*cols], qa); err != nil {
					t.Fatal(err)
				}
				if err := quant.Dequantize(vt, qa, xd[tok*cols:(tok+1)*cols]); err != nil {
					t.Fatal(err)
				}
			}
			out := make([]float32, n*rows)
			m := Matrix{Type: typ, Rows: rows, Cols: cols, Data: data}
			if err := p.MatMul(m, x, n, out); err != nil {
				t.Fatal(err)
			}
			for tok := 0; tok < n; tok++ {
				for i := 0; i < rows; i++ {
					var s float64
					for j := 0; j < cols; j++ {
						s += float64(wd[i*cols+j]) * float64(xd[tok*cols+j])
					}
					if d := math.Abs(s - float64(out[tok*rows+i])); d > 1e-4*(1+math.Abs(s)) {
						t.Fatalf("token %d row %d: %g, want %g", tok, i, out[tok*rows+i], s)
					}
				}
			}
			// one token at a time gives the same bits as the batch
			one := make([]float32, rows)
			if err := p.MatMul(m, x[cols:2*cols], 1, one); err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(one, out[rows:2*rows]); d != 0 {
				t.Errorf("single-row result differs by %g", d)
			}
		})
	}
	if err := p.MatMul(Matrix{Type: quant.F32, Rows: rows, Cols: cols, Data: make([]byte, 10)}, x, n, make([]float32, n*rows)); err == nil {
		t.Error("short matrix accepted")
	}
}

func TestNorms(t *testing.T) {
	x := []float32{3, 4, 0, 0, 1, 1, 1, 1}
	y := make([]float32, 8)
	RMSNorm(y, x, []float32{1, 2, 1, 1}, 4, 0)
	// rms of row 0 = sqrt(25/4) = 2.5
	want := []float32{1.2, 3.2, 0, 0, 1, 2, 1, 1}
	if d := maxDiff(want, y); d > 1e-6 {
		t.Errorf("rmsnorm %v", y)
	}
	L2Norm(x, 4, 1e-6)
	if d := maxDiff([]float32{0.6, 0.8, 0, 0, 0.5, 0.5, 0.5, 0.5}, x); d > 1e-6 {
		t.Errorf("l2norm %v", x)
	}
	s := []float32{1, 2, 3}
	Softmax(s, s)
	if d := maxDiff([]float32{0.09003057, 0.24472847, 0.66524096}, s); d > 1e-6 {
		t.Errorf("softmax %v", s)
	}
}

func TestConvStepSplits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const n, c, k = 7, 5, 4
	x, w := randVec(r, n*c), randVec(r, c*k)
	st1, st2 := randVec(r, c*(k-1)), make([]float32, c*(k-1))
	copy(st2, st1)
	all := make([]float32, n*c)
	ConvStep(st1, x, w, all, n, c, k)
	one := make([]float32, c)
	for tok := 0; tok < n; tok++ {
		ConvStep(st2, x[tok*c:(tok+1)*c], w, one, 1, c, k)
		if d := maxDiff(all[tok*c:(tok+1)*c], one); d != 0 {
			t.Fatalf("token %d differs by %g", tok, d)
		}
	}
	if d := maxDiff(st1, st2); d != 0 {
		t.Errorf("states differ by %g", d)
	}
}

// TestDeltaRule checks the recurrence against the plain matrix form
// S_t = diag(e^g)S_{t-1} + β k (v - (diag(e^g)S_{t-1})ᵀk)ᵀ, o = S_tᵀq/√s.
func TestDeltaRule(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n, h, s = 5, 2, 4
	for _, kda := range []bool{true, false} {
		q, k, v := randVec(r, n*h*s), randVec(r, n*h*s), randVec(r, n*h*s)
		L2Norm(q, s, 1e-6)
		L2Norm(k, s, 1e-6)
		gn := n * h
		if kda {
			gn = n * h * s
		}
		g := randVec(r, gn)
		for i := range g {
			g[i] = -float32(math.Abs(float64(g[i])))
		}
		beta := randVec(r, n*h)
		for i := range beta {
			beta[i] = Sigmoid(beta[i])
		}
		state := make([]float32, h*s*s)
		out := make([]float32, n*h*s)
		DeltaRule{Heads: h, Dim: s, KDA: kda}.Run(NewPool(2), state, q, k, v, g, beta, out, n)

		for head := 0; head < h; head++ {
			var S [s][s]float64 // S[i][j], i over keys
			for tok := 0; tok < n; tok++ {
				off := (tok*h + head) * s
				for i := 0; i < s; i++ {
					gi := float64(g[tok*h+head])
					if kda {
						gi = float64(g[off+i])
					}
					for j := 0; j < s; j++ {
						S[i][j] *= math.Exp(gi)
					}
				}
				var d [s]float64
				for j := 0; j < s; j++ {
					var sk float64
					for i := 0; i < s; i++ {
						sk += S[i][j] * float64(k[off+i])
					}
					d[j] = (float64(v[off+j]) - sk) * float64(beta[tok*h+head])
				}
				for i := 0; i < s; i++ {
					for j := 0; j < s; j++ {
						S[i][j] += float64(k[off+i]) * d[j]
					}
				}
				for j := 0; j < s; j++ {
					var o float64
					for i := 0; i < s; i++ {
						o += S[i][j] * float64(q[off+i])
					}
					o /= math.Sqrt(s)
					if math.Abs(o-float64(out[off+j])) > 1e-5 {
						t.Fatalf("kda=%v head %d token %d: out[%d] = %g, want %g", kda, head, tok, j, out[off+j], o)
					}
				}
			}
		}
	}
}

func TestAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const n, dk, dv = 150, 24, 16
	keys := randVec(r, n*dk)
	kv := HalfKV{Data: make([]uint16, n*dk), Stride: dk, DK: dk, DV: dv}
	for p := 0; p < n; p++ {
		PutHalf(kv.Data[p*dk:(p+1)*dk], keys[p*dk:(p+1)*dk])
	}
	q := randVec(r, dk)
	scale := float32(0.3)
	// exact softmax attention over the half-rounded cache
	want := make([]float64, dv)
	sc := make([]float64, n)
	m := math.Inf(-1)
	for p := 0; p < n; p++ {
		var s float64
		for i := 0; i < dk; i++ {
			s += float64(quant.FP16ToFP32(kv.Data[p*dk+i])) * float64(q[i])
		}
		sc[p] = s * float64(scale)
		m = max(m, sc[p])
	}
	var z float64
	for p := 0; p < n; p++ {
		e := math.Exp(sc[p] - m)
		z += e
		for d := 0; d < dv; d++ {
			want[d] += e * float64(quant.FP16ToFP32(kv.Data[p*dk+d]))
		}
	}
	for name, f := range map[string]func([]float32, HalfKV, int, float32, []float32){"half": AttendHalf, "tiled": AttendTiled} {
		out := make([]float32, dv)
		f(q, kv, n, scale, out)
		for d := range out {
			if math.Abs(want[d]/z-float64(out[d])) > 2e-3 {
				t.Errorf("%s: out[%d] = %g, want %g", name, d, out[d], want[d]/z)
			}
		}
	}
}

func TestDeltaRuleChunked(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	const n, h, s = 37, 3, 8
	for _, kda := range []bool{true, false} {
		for _, chunk := range []int{1, 5, 16, 64} {
			q, k, v := randVec(r, n*h*s), randVec(r, n*h*s), randVec(r, n*h*s)
			L2Norm(q, s, 1e-6)
			L2Norm(k, s, 1e-6)
			gn := n * h
			if kda {
				gn *= s
			}
			g := randVec(r, gn)
			for i := range g {
				g[i] = -float32(math.Abs(float64(g[i]))) * 0.5
			}
			beta := randVec(r, n*h)
			for i := range beta {
				beta[i] = Sigmoid(beta[i])
			}
			s0 := randVec(r, h*s*s)
			s1, s2 := append([]float32(nil), s0...), append([]float32(nil), s0...)
			o1, o2 := make([]float32, n*h*s), make([]float32, n*h*s)
			dr := DeltaRule{Heads: h, Dim: s, KDA: kda}
			dr.Run(NewPool(2), s1, q, k, v, g, beta, o1, n)
			dr.RunChunked(NewPool(2), s2, q, k, v, g, beta, o2, n, chunk)
			if d := maxDiff(o1, o2); d > 2e-5 {
				t.Errorf("kda=%v chunk=%d: outputs differ by %g", kda, chunk, d)
			}
			if d := maxDiff(s1, s2); d > 2e-5 {
				t.Errorf("kda=%v chunk=%d: states differ by %g", kda, chunk, d)
			}
		}
	}
}
