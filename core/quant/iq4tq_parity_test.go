package quant_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/tools/parity"
)

// Parity of IQ4_NL, IQ4_XS, TQ1_0 and TQ2_0 with libggml: bit-identical
// dequantize, ggml_quantize_chunk (no importance matrix) and generic dot
// products, on 100k blocks per type (-short: a few thousand).

// TestParityIQ4NL runs IQ4_NL, a 32-element type with Q8_0 activations,
// through the same checks as the other 32-element types.
func TestParityIQ4NL(t *testing.T) {
	r := parity.Require(t)
	perFamily := 32 * 17408 // 6 families: 104448 blocks of 32
	if testing.Short() {
		perFamily = 32 * 1024
	}
	typ := quant.IQ4_NL
	weights := concatInputs(quant.BlockInputs(21, perFamily))
	acts := concatInputs(quant.BlockInputs(22, perFamily))
	w := checkQuantizeParity(t, r, typ, weights, parityRowLen)
	checkDequantizeParity(t, r, typ, w)
	a := checkFromFloatParity(t, r, typ.VecDotType(), acts)
	checkVecDotParity(t, r, typ, parityRowLen, w, a)
	for _, n := range []int{32, 96} {
		checkVecDotParity(t, r, typ, n, w[:rowBytes(t, typ, n*64)], a[:rowBytes(t, typ.VecDotType(), n*64)])
	}
	rng := rand.New(rand.NewPCG(uint64(typ), 7))
	checkVecDotParity(t, r, typ, parityRowLen,
		randomBytes(rng, rowBytes(t, typ, 64*parityRowLen)),
		randomBytes(rng, rowBytes(t, typ.VecDotType(), 64*parityRowLen)))
}

// iq4tqKTypes are the 256-element types of this file (Q8_K activations).
var iq4tqKTypes = []quant.Type{quant.IQ4_XS, quant.TQ1_0, quant.TQ2_0}

// iq4tqScaleOffset is the byte offset of each type's fp16 super-block scale.
var iq4tqScaleOffset = map[quant.Type]int{quant.IQ4_XS: 0, quant.TQ1_0: 52, quant.TQ2_0: 64}

// rawScaledBlocks is rawBlocks for these types: random bytes with a finite
// random fp16 scale, so the dot products stay comparable bit for bit.
func rawScaledBlocks(r *rand.Rand, typ quant.Type, n int) []byte {
	b := rawBlocks(r, typ, n)
	off, size := iq4tqScaleOffset[typ], typ.TypeSize()
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(b[i*size+off:], quant.FP32ToFP16(float32(r.NormFloat64()*logUniform(r, -7, 1))))
	}
	return b
}

func TestParityIQ4XSTernary(t *testing.T) {
	r := parity.Require(t)
	nb := kParityBlocks(t) / kRowBlocks * kRowBlocks
	x, family := kInputs(31, nb)
	nb = len(family) / kRowBlocks * kRowBlocks
	x, family = x[:nb*quant.QK_K], family[:nb]

	xa, _ := kInputs(32, nb)
	rng := rand.New(rand.NewPCG(33, 33))
	act, err := r.FromFloat(quant.Q8_K, xa[:nb*quant.QK_K], parity.Generic)
	if err != nil {
		t.Fatal(err)
	}
	act = append(act, rawBlocks(rng, quant.Q8_K, nb)...)

	for _, typ := range iq4tqKTypes {
		t.Run(typ.String(), func(t *testing.T) {
			ref, err := r.Quantize(typ, x, kRowBlocks*quant.QK_K)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(ref))
			if err := quant.Quantize(typ, x, got); err != nil {
				t.Fatal(err)
			}
			diffBlocks(t, "quantize", typ.TypeSize(), got, ref, family)

			w := append(ref, rawScaledBlocks(rng, typ, nb)...)
			checkDequantize(t, r, typ, w)
			checkVecDot(t, r, typ, w, act)
			// Random bytes everywhere, NaN and inf scales included: only
			// dequantize is compared (a NaN dot product has no one payload).
			checkDequantize(t, r, typ, randomBytes(rng, 4096*typ.TypeSize()))
		})
	}
}

// TestParityIQ4Imatrix holds QuantizeImatrix to ggml_quantize_chunk with
// an importance matrix (the llama-quantize --imatrix path) for IQ4_NL and
// IQ4_XS: per column weights spread over six decades, some zero.
func TestParityIQ4Imatrix(t *testing.T) {
	r := parity.Require(t)
	nb := slowQuantizeBlocks(t) / kRowBlocks * kRowBlocks
	x, family := kInputs(41, nb)
	nb = len(family) / kRowBlocks * kRowBlocks
	x = x[:nb*quant.QK_K]
	n := kRowBlocks * quant.QK_K
	rng := rand.New(rand.NewPCG(42, 42))
	imatrix := make([]float32, n)
	for i := range imatrix {
		if rng.IntN(50) != 0 {
			imatrix[i] = float32(logUniform(rng, -4, 2))
		}
	}
	for _, typ := range []quant.Type{quant.IQ4_NL, quant.IQ4_XS} {
		t.Run(typ.String(), func(t *testing.T) {
			ref, err := r.QuantizeImatrix(typ, x, n, imatrix)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(ref))
			if err := quant.QuantizeImatrix(typ, x, got, n, imatrix); err != nil {
				t.Fatal(err)
			}
			blockFamily := family
			if typ.BlockSize() == 32 {
				blockFamily = make([]string, 0, 8*len(family))
				for _, f := range family {
					for range 8 {
						blockFamily = append(blockFamily, f)
					}
				}
			}
			diffBlocks(t, "quantize with imatrix", typ.TypeSize(), got, ref, blockFamily)
			plain := make([]byte, len(ref))
			if err := quant.Quantize(typ, x, plain); err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(plain, got) {
				t.Errorf("the importance matrix changed nothing")
			}
		})
	}
}
