package ops

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// Each fast op against its reference copy in ref_test.go, bit for bit, on
// random inputs and on inputs that reach the half range's edges.

func sameBits(t *testing.T, name string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %g (%#08x), want %g (%#08x)", name, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// halfCache fills rows of a cache with values of magnitude about mag.
func halfCache(r *rand.Rand, rows, stride int, mag float64) []uint16 {
	x := make([]float32, rows*stride)
	for i := range x {
		x[i] = float32(r.NormFloat64() * mag)
		switch r.IntN(500) {
		case 0:
			x[i] = float32(r.NormFloat64() * 1e-6)
		case 1:
			x[i] = 0
		}
	}
	h := make([]uint16, len(x))
	PutHalf(h, x)
	return h
}

func TestAttendExact(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	type layout struct {
		name string
		kv   HalfKV
	}
	layouts := []layout{
		{"absorbed", HalfKV{Stride: 72, KOff: 0, DK: 72, VOff: 0, DV: 64}},
		{"expanded", HalfKV{Stride: 3 * (24 + 16), KOff: 24, DK: 24, VOff: 3*24 + 16, DV: 16}},
		{"odd", HalfKV{Stride: 37, KOff: 1, DK: 19, VOff: 20, DV: 17}},
	}
	for _, lay := range layouts {
		for _, mag := range []float64{0.05, 1, 30, 3000} {
			for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 13, 64, 65, 130, 300} {
				kv := lay.kv
				kv.Data = halfCache(r, n, kv.Stride, mag)
				q := randVec(r, kv.DK)
				for i := range q {
					q[i] *= float32(mag)
				}
				scale := float32(1 / math.Sqrt(float64(kv.DK)))
				got, want := make([]float32, kv.DV), make([]float32, kv.DV)
				AttendHalf(q, kv, n, scale, got)
				attendHalfRef(q, kv, n, scale, want)
				sameBits(t, lay.name+"/half", got, want)
				AttendTiled(q, kv, n, scale, got)
				attendTiledRef(q, kv, n, scale, want)
				sameBits(t, lay.name+"/tiled", got, want)
				for _, nth := range []int{1, 2, 3, 8} {
					nkv := max(512, (n+255)/256*256)
					AttendHalfSplit(q, kv, n, nkv, nth, scale, got)
					attendHalfSplitRef(q, kv, n, nkv, nth, scale, want)
					sameBits(t, lay.name+"/split", got, want)
					AttendHalfSplit(q, kv, n, n, nth, scale, got)
					attendHalfSplitRef(q, kv, n, n, nth, scale, want)
					sameBits(t, lay.name+"/split-n", got, want)
				}
			}
		}
	}
}

func TestPutHalfExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	x := randVec(r, 1001)
	for i := range x {
		x[i] *= float32(math.Exp(r.NormFloat64() * 8))
	}
	x[0], x[1], x[2] = float32(math.NaN()), float32(math.Inf(-1)), 65520
	got, want := make([]uint16, len(x)), make([]uint16, len(x))
	PutHalf(got, x)
	putHalfRef(want, x)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("PutHalf [%d] %g: %#04x, want %#04x", i, x[i], got[i], want[i])
		}
	}
}

func TestDeltaRuleExact(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, kda := range []bool{false, true} {
		for _, s := range []int{1, 3, 4, 6, 8, 16, 33, 128} {
			const h, n = 3, 5
			state := randVec(r, h*s*s)
			q, k, v := randVec(r, n*h*s), randVec(r, n*h*s), randVec(r, n*h*s)
			L2Norm(q, s, 1e-6)
			L2Norm(k, s, 1e-6)
			g := randVec(r, n*h*s)
			for i := range g {
				g[i] = -float32(math.Abs(float64(g[i])))
			}
			beta := randVec(r, n*h)
			for i := range beta {
				beta[i] = Sigmoid(beta[i])
			}
			d := DeltaRule{Heads: h, Dim: s, KDA: kda}
			st2 := append([]float32(nil), state...)
			out, out2 := make([]float32, n*h*s), make([]float32, n*h*s)
			d.Run(NewPool(2), state, q, k, v, g, beta, out, n)
			deltaRunRef(d, st2, q, k, v, g, beta, out2, n)
			sameBits(t, "delta out", out, out2)
			sameBits(t, "delta state", state, st2)
		}
	}
}

func TestConvStepExact(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 2, 7} {
		for _, k := range []int{2, 4} {
			const c = 37
			state := randVec(r, c*(k-1))
			x, w := randVec(r, n*c), randVec(r, c*k)
			x[0], state[1], w[2], w[5] = 0, 0, -1, float32(math.Copysign(0, -1))
			st2 := append([]float32(nil), state...)
			out, out2 := make([]float32, n*c), make([]float32, n*c)
			ConvStep(state, x, w, out, n, c, k)
			convStepRef(st2, x, w, out2, n, c, k)
			sameBits(t, "conv out", out, out2)
			sameBits(t, "conv state", state, st2)
		}
	}
}

func TestSiTUExact(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, lb := range []float32{0, 7} {
		g, u := randVec(r, 4099), randVec(r, 4099)
		for i := range g {
			g[i] *= float32(math.Exp(r.NormFloat64() * 3))
			u[i] *= float32(math.Exp(r.NormFloat64() * 3))
		}
		g2 := append([]float32(nil), g...)
		SiTU(g, u, 4, lb)
		situRef(g2, u, 4, lb)
		sameBits(t, "situ", g, g2)
	}
}

// TestHalfAccExact checks the accumulator step (the assembly one where the
// CPU has it) against the reference's rounding on every kind of value: each
// half as v, accumulators across the half range, Inf and NaN of both signs.
func TestHalfAccExact(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	const n = 1 << 16
	v := make([]uint16, n+5)
	for i := range v {
		v[i] = uint16(i)
	}
	acc := make([]float32, len(v))
	for _, ms := range []float32{1, 0.75, 0, 1e-3, float32(math.Inf(1))} {
		for _, vs := range []float32{1, 0.3, 0, 5e-5, 1e4, float32(math.NaN()), float32(math.Copysign(math.NaN(), -1)), float32(math.Inf(-1))} {
			for i := range acc {
				x := float32(r.NormFloat64() * math.Exp(r.NormFloat64()*6))
				switch r.IntN(16) {
				case 0:
					x = float32(math.Inf(1 - 2*r.IntN(2)))
				case 1:
					x = float32(math.Copysign(math.NaN(), float64(1-2*r.IntN(2))))
				case 2:
					x = 0
				}
				acc[i] = quant.RoundFP16(x)
			}
			in := append([]float32(nil), acc...)
			want := append([]float32(nil), acc...)
			// When a NaN meets a NaN, which one comes out depends on the
			// operand order the compiler picked (Go does not define it, and
			// the reference copy and the old loop were compiled differently):
			// both are accepted.
			alt := append([]float32(nil), acc...)
			for d := range want {
				a := want[d]
				if ms != 1 {
					a = quant.RoundFP16(a * ms)
				}
				p := float32(quant.FP16ToFP32(v[d]) * vs)
				want[d] = quant.RoundFP16(a + p)
				if a != a && p != p {
					want[d], alt[d] = quant.RoundFP16(a), quant.RoundFP16(p)
				} else {
					alt[d] = want[d]
				}
			}
			halfAcc(acc, v, ms, vs)
			for d := range want {
				if g := math.Float32bits(acc[d]); g != math.Float32bits(want[d]) && g != math.Float32bits(alt[d]) {
					t.Fatalf("halfAcc(acc %#08x, v %#04x, ms %g, vs %#08x) = %#08x, want %#08x", math.Float32bits(in[d]), v[d], ms, math.Float32bits(vs), math.Float32bits(acc[d]), math.Float32bits(want[d]))
				}
			}
		}
	}
}
