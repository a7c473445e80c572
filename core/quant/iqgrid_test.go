package quant_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// TestIQGridVecDotMatchesDequantized checks each IQ dot product against the
// float dot of the dequantized weights and activations: the same values,
// only the rounding of the sums differs.
func TestIQGridVecDotMatchesDequantized(t *testing.T) {
	const blocks = 8
	n := blocks * quant.QK_K
	for _, typ := range iqGridTypes {
		t.Run(typ.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(typ), 31))
			for trial := 0; trial < 50; trial++ {
				w := rawIQBlocks(rng, typ, blocks)
				a := rawBlocks(rng, quant.Q8_K, blocks)
				got, err := quant.VecDot(typ, n, w, a)
				if err != nil {
					t.Fatal(err)
				}
				wf, af := make([]float32, n), make([]float32, n)
				if err := quant.Dequantize(typ, w, wf); err != nil {
					t.Fatal(err)
				}
				if err := quant.Dequantize(quant.Q8_K, a, af); err != nil {
					t.Fatal(err)
				}
				var want, mag float64
				for i := range wf {
					want += float64(wf[i]) * float64(af[i])
					mag += math.Abs(float64(wf[i]) * float64(af[i]))
				}
				if d := math.Abs(float64(got) - want); d > 1e-5*mag || math.IsNaN(float64(got)) {
					t.Fatalf("trial %d: VecDot = %g, dequantized dot = %g (|diff| %g, sum|terms| %g)", trial, got, want, d, mag)
				}
			}
		})
	}
}

// TestIQGridKnownValues pins one decoded value per type, worked out by hand
// from ggml's formulas and tables, so a layout slip fails without the
// reference harness.
func TestIQGridKnownValues(t *testing.T) {
	tests := []struct {
		typ  quant.Type
		set  func(b []byte)
		elem int
		want float32
	}{
		// d=1, group 0 index 1 (0x080808080808082b: byte 0 = 43), ls=1:
		// 1*(0.5+1)*0.25*43 = 16.125; sign index 1 = ksigns 129 flips element 0.
		{quant.IQ2_XXS, func(b []byte) { b[1] = 0x3c; b[2] = 1; b[6] = 1; b[9] = 0x10 }, 0, -16.125},
		// d=1, qs[0] = index 1 with sign index 0, scales[0] low nibble 2:
		// (0.5+2)*0.25*43 = 26.875.
		{quant.IQ2_XS, func(b []byte) { b[1] = 0x3c; b[2] = 1; b[66] = 2 }, 0, 26.875},
		// d=2, qs[1]=0 with qh high bits 0, signs[1] = 0x02 flips element 9;
		// scale 0: (2*0.5)*0.25*8 = 2 -> -2.
		{quant.IQ2_S, func(b []byte) { b[1] = 0x40; b[35] = 0x02 }, 9, -2},
		// d=1, qs[0] = 1 (0x04040414: byte 0 = 0x14 = 20), scale bits 0:
		// 0.5*0.5*20 = 5.
		{quant.IQ3_XXS, func(b []byte) { b[1] = 0x3c; b[2] = 1 }, 0, 5},
		// d=1, scales[0] low nibble 1 -> dl 3; qs[0] = 1 (iq3s_grid[1] =
		// 0x01010103: byte 0 = 3): 9.
		{quant.IQ3_S, func(b []byte) { b[1] = 0x3c; b[2] = 1; b[106] = 1 }, 0, 9},
		// d=1, qh[0] = 0x8000 (delta -1/8, ls 0 -> dl 1), index 0 = all -1:
		// 1*(-1-0.125).
		{quant.IQ1_S, func(b []byte) { b[1] = 0x3c; b[35] = 0x80 }, 3, -1.125},
		// d=1 (0x3c00 in the top nibbles: sc[2] top = 0xc, sc[3] top = 0x3),
		// ls1 = 0 -> dl 1, index 0 = all -1, delta +1/8: -0.875.
		{quant.IQ1_M, func(b []byte) { b[53] = 0xc0; b[55] = 0x30 }, 5, -0.875},
	}
	for _, tt := range tests {
		t.Run(tt.typ.String(), func(t *testing.T) {
			b := make([]byte, tt.typ.TypeSize())
			tt.set(b)
			y := make([]float32, quant.QK_K)
			if err := quant.Dequantize(tt.typ, b, y); err != nil {
				t.Fatal(err)
			}
			if y[tt.elem] != tt.want {
				t.Errorf("element %d = %g, want %g", tt.elem, y[tt.elem], tt.want)
			}
		})
	}
}

func TestIQGridSizeErrors(t *testing.T) {
	for _, typ := range iqGridTypes {
		t.Run(typ.String(), func(t *testing.T) {
			if tr, ok := typ.Traits(); !ok || tr.BlockSize != quant.QK_K || tr.VecDotType != quant.Q8_K {
				t.Fatalf("traits %+v", tr)
			}
			if err := quant.Dequantize(typ, make([]byte, typ.TypeSize()-1), make([]float32, quant.QK_K)); err == nil {
				t.Error("Dequantize from a short buffer succeeded")
			}
			if err := quant.Dequantize(typ, make([]byte, 2*typ.TypeSize()), make([]float32, 100)); err == nil {
				t.Error("Dequantize of a partial block succeeded")
			}
			if _, err := quant.VecDot(typ, quant.QK_K, make([]byte, typ.TypeSize()), make([]byte, 100)); err == nil {
				t.Error("VecDot with a short activation row succeeded")
			}
			if got, err := quant.ParseType(typ.String()); err != nil || got != typ {
				t.Errorf("ParseType(%q) = %v, %v", typ.String(), got, err)
			}
		})
	}
}
