package quant_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// TestIQQuantizeRoundTrip quantizes gaussian rows with and without an
// importance matrix and bounds the relative RMS error of the round trip by
// what each type's bits allow (measured on this data with a margin): a
// quantizer that stores the wrong grid point, sign or scale lands far above.
func TestIQQuantizeRoundTrip(t *testing.T) {
	bound := map[quant.Type]float64{quant.IQ1_S: 0.55, quant.IQ1_M: 0.65, quant.IQ2_XXS: 0.4,
		quant.IQ2_XS: 0.35, quant.IQ2_S: 0.3, quant.IQ3_XXS: 0.24, quant.IQ3_S: 0.19}
	const perRow = 2 * quant.QK_K
	rng := rand.New(rand.NewPCG(41, 41))
	x := make([]float32, 4*perRow)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	im := make([]float32, perRow)
	for i := range im {
		im[i] = float32(0.5 + rng.Float64())
	}
	for _, typ := range iqGridTypes {
		for _, qw := range [][]float32{im, nil} {
			if qw == nil && quant.RequiresImatrix(typ) {
				continue
			}
			q := make([]byte, rowBytes(t, typ, len(x)))
			if err := quant.QuantizeImatrix(typ, x, q, perRow, qw); err != nil {
				t.Fatal(err)
			}
			y := make([]float32, len(x))
			if err := quant.Dequantize(typ, q, y); err != nil {
				t.Fatal(err)
			}
			var se, s2 float64
			for i := range x {
				d := float64(x[i] - y[i])
				se += d * d
				s2 += float64(x[i]) * float64(x[i])
			}
			rel := math.Sqrt(se / s2)
			t.Logf("%s (imatrix %v): relative RMS error %.3f", typ, qw != nil, rel)
			if rel > bound[typ] || math.IsNaN(rel) {
				t.Errorf("%s (imatrix %v): relative RMS error %.3f > %.2f", typ, qw != nil, rel, bound[typ])
			}
		}
	}
}

func TestIQQuantizeErrors(t *testing.T) {
	x := make([]float32, 2*quant.QK_K)
	q := make([]byte, 2*quant.IQ2_XXS.TypeSize())
	if err := quant.QuantizeImatrix(quant.IQ2_XXS, x, q, quant.QK_K, nil); err == nil {
		t.Error("IQ2_XXS without an importance matrix succeeded")
	}
	if err := quant.Quantize(quant.IQ2_XXS, x, q); err == nil {
		t.Error("Quantize (no importance matrix) to IQ2_XXS succeeded")
	}
	if err := quant.QuantizeImatrix(quant.IQ2_XXS, x, q, quant.QK_K, make([]float32, 100)); err == nil {
		t.Error("an importance matrix of the wrong length was accepted")
	}
	if err := quant.QuantizeImatrix(quant.IQ2_XXS, x, q, 100, make([]float32, 100)); err == nil {
		t.Error("rows of a partial block were accepted")
	}
	if err := quant.QuantizeImatrix(quant.IQ2_XXS, x, q[:10], quant.QK_K, make([]float32, quant.QK_K)); err == nil {
		t.Error("a short destination was accepted")
	}
	if err := quant.QuantizeImatrix(quant.Q4_K, x, make([]byte, 2*quant.Q4_K.TypeSize()), quant.QK_K, make([]float32, quant.QK_K)); err == nil {
		t.Error("an importance matrix for Q4_K (no weighted quantizer in k3) was silently ignored")
	}
	// Without an importance matrix a type with a plain quantizer is Quantize.
	a, b := make([]byte, 2*quant.IQ3_S.TypeSize()), make([]byte, 2*quant.IQ3_S.TypeSize())
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	if err := quant.QuantizeImatrix(quant.IQ3_S, x, a, quant.QK_K, nil); err != nil {
		t.Fatal(err)
	}
	if err := quant.Quantize(quant.IQ3_S, x, b); err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Error("QuantizeImatrix without an importance matrix differs from Quantize")
	}
}
