package quant

import (
	"math/rand/v2"
	"testing"
)

// Self-tests of iq4.go and tq.go that need no reference library; the
// bit-for-bit checks against libggml are in iq4tq_parity_test.go.

// TestTernaryExact: rows of -s, 0, +s with s exact in fp16 decode to
// themselves through both ternary types.
func TestTernaryExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 4*QK_K)
	for i := range x {
		x[i] = 0.5 * float32(r.IntN(3)-1)
	}
	x[7] = 0.5 // every block has its maximum
	for b := 1; b < 4; b++ {
		x[b*QK_K+b] = -0.5
	}
	for _, typ := range []Type{TQ1_0, TQ2_0} {
		q := quantizeOrFatal(t, typ, x)
		y := dequantizeOrFatal(t, typ, q, len(x))
		for i := range x {
			if y[i] != x[i] {
				t.Fatalf("%s: element %d = %g, want %g", typ, i, y[i], x[i])
			}
		}
	}
}

// TestIQ4Grid: a block made of table values times an fp16-exact scale
// comes back exactly.
func TestIQ4Grid(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, QK_K)
	for i := range x {
		x[i] = 0.125 * float32(IQ4NLValues[r.IntN(16)])
	}
	x[3] = 0.125 * -127 // the block maximum is the table's end
	q := quantizeOrFatal(t, IQ4_NL, x)
	y := dequantizeOrFatal(t, IQ4_NL, q, len(x))
	for i := range x[:32] {
		if y[i] != x[i] {
			t.Fatalf("element %d = %g, want %g", i, y[i], x[i])
		}
	}
}

func TestQuantizeImatrixErrors(t *testing.T) {
	x := make([]float32, 2*QK_K)
	dst := make([]byte, 2*iq4XSBytes)
	w := make([]float32, QK_K)
	cases := []struct {
		name string
		err  error
	}{
		{"type without imatrix", QuantizeImatrix(Q4_0, x, dst, QK_K, w)},
		{"row not whole blocks", QuantizeImatrix(IQ4_XS, x, dst, 100, w[:100])},
		{"short imatrix", QuantizeImatrix(IQ4_XS, x, dst, QK_K, w[:10])},
		{"short dst", QuantizeImatrix(IQ4_XS, x, dst[:10], QK_K, w)},
		{"zero row", QuantizeImatrix(IQ4_NL, x, dst, 0, nil)},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if err := QuantizeImatrix(IQ4_XS, x, dst, QK_K, w); err != nil {
		t.Fatal(err)
	}
}
