package quant_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/tools/parity"
)

// iqQuantTypes are the grid IQ types with a reference quantizer in k3.
var iqQuantTypes = []quant.Type{quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ3_XXS, quant.IQ3_S,
	quant.IQ1_S, quant.IQ1_M}

// iqQuantInputs returns the K-quant input families without the blocks that
// hold NaN or Inf (on those ggml's IQ quantizers assert), with their family
// names, cut to whole rows of kRowBlocks super-blocks.
func iqQuantInputs(seed uint64, blocks int) ([]float32, []string) {
	x, family := kInputs(seed, blocks)
	var outX []float32
	var outF []string
	for b := range family {
		blk := x[b*quant.QK_K : (b+1)*quant.QK_K]
		finite := true
		for _, v := range blk {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				finite = false
				break
			}
		}
		if finite {
			outX = append(outX, blk...)
			outF = append(outF, family[b])
		}
	}
	n := len(outF) / kRowBlocks * kRowBlocks
	return outX[:n*quant.QK_K], outF[:n]
}

// randomImatrix is an importance matrix of n columns spread over four
// orders of magnitude, with a few exact zeros (columns no token used).
func randomImatrix(rng *rand.Rand, n int) []float32 {
	m := make([]float32, n)
	for i := range m {
		if rng.IntN(50) != 0 {
			m[i] = float32(logUniform(rng, -2, 2))
		}
	}
	return m
}

func TestIQQuantizeParity(t *testing.T) {
	r := parity.Require(t)
	nb := slowQuantizeBlocks(t) * 102 / 100 // ~1.4% of the edge family is non-finite and left out
	x, family := iqQuantInputs(31, nb)
	const perRow = kRowBlocks * quant.QK_K
	imatrix := randomImatrix(rand.New(rand.NewPCG(32, 32)), perRow)
	for _, typ := range iqQuantTypes {
		for _, withIM := range []bool{true, false} {
			if !withIM && quant.RequiresImatrix(typ) {
				continue
			}
			name := typ.String() + "/imatrix"
			qw := imatrix
			if !withIM {
				name, qw = typ.String()+"/plain", nil
			}
			t.Run(name, func(t *testing.T) {
				var want []byte
				var err error
				if qw != nil {
					want, err = r.QuantizeImatrix(typ, x, perRow, qw)
				} else {
					want, err = r.Quantize(typ, x, perRow)
				}
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(want))
				if err := quant.QuantizeImatrix(typ, x, got, perRow, qw); err != nil {
					t.Fatal(err)
				}
				diffBlocks(t, "quantize", typ.TypeSize(), got, want, family)
			})
		}
	}
}
