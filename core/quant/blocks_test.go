package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// blockTypes are the 32-element block types this file tests.
var blockTypes = []Type{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4}

func quantizeOrFatal(t *testing.T, typ Type, x []float32) []byte {
	t.Helper()
	n, err := RowSize(typ, int64(len(x)))
	if err != nil {
		t.Fatal(err)
	}
	q := make([]byte, n)
	if err := Quantize(typ, x, q); err != nil {
		t.Fatal(err)
	}
	return q
}

func dequantizeOrFatal(t *testing.T, typ Type, q []byte, n int) []float32 {
	t.Helper()
	y := make([]float32, n)
	if err := Dequantize(typ, q, y); err != nil {
		t.Fatal(err)
	}
	return y
}

// TestBlockExactGrid quantizes rows that lie exactly on each type's grid,
// so the round trip must reproduce them bit for bit.
func TestBlockExactGrid(t *testing.T) {
	mxfp4Grid := []float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
	tests := []struct {
		typ Type
		x   func(j int) float32
	}{
		{Q4_0, func(j int) float32 { return float32(j%16-8) * 0.25 }},
		{Q4_1, func(j int) float32 { return 1 + float32(j%16)*0.5 }},
		{Q5_0, func(j int) float32 { return float32(j-16) * 0.125 }},
		{Q5_1, func(j int) float32 { return 3 + float32(j)*0.25 }},
		{Q8_0, func(j int) float32 { return float32(j*8-127) * 0.5 }},
		{MXFP4, func(j int) float32 { return mxfp4Grid[j%16] * 8 }},
	}
	for _, tt := range tests {
		t.Run(tt.typ.String(), func(t *testing.T) {
			x := make([]float32, 64)
			for j := range x {
				x[j] = tt.x(j % 32)
			}
			y := dequantizeOrFatal(t, tt.typ, quantizeOrFatal(t, tt.typ, x), len(x))
			if diff := cmp.Diff(x, y); diff != "" {
				t.Errorf("round trip (-in +out):\n%s", diff)
			}
		})
	}
}

// TestBlockKnownBytes pins the byte layout of one block per type.
func TestBlockKnownBytes(t *testing.T) {
	ramp := make([]float32, 32)
	for j := range ramp {
		ramp[j] = float32(j) - 16 // max magnitude -16 at j = 0
	}
	tests := []struct {
		typ  Type
		want string // hex of the first bytes
	}{
		// d = -16/-8 = 2 (0x4000); codes (x/2)+8: j=0 -> 0, j=16 -> 8.
		// j=15 and j=31 show the clamp: x=15 -> 16 -> 15.
		{Q4_0, "0040" + "809191a2a2b3b3c4c4d5d5e6e6f7f7f8"},
		// d = 31/15, m = -16 (0xcc00).
		{Q4_1, "22" + "40" + "00cc"},
		// d = -16/-16 = 1 (0x3c00); codes x+16 = j: qh bit set for j >= 16.
		{Q5_0, "003c" + "0000ffff" + "00112233445566778899aabbccddeeff"},
		// d = 16/127, qs = round(x*127/16); j=0 -> -127 (0x81).
		{Q8_0, "0830" + "81"},
		// amax 16: e = 4-2+127 = 129, d = 2; -16 is code 14 (-8*2); ties
		// go to the lower code: x=1 -> 0 (not 2), x=-14 -> 13 (-12, not -16).
		{MXFP4, "81" + "0e0e1d"},
	}
	for _, tt := range tests {
		t.Run(tt.typ.String(), func(t *testing.T) {
			got := fmt.Sprintf("%x", quantizeOrFatal(t, tt.typ, ramp))
			if got[:len(tt.want)] != tt.want {
				t.Errorf("bytes = %s, want prefix %s", got, tt.want)
			}
		})
	}
}

// errBound is the largest round-trip error allowed for block x: half a step
// (a full step where the code range clamps) plus the error of storing the
// scale and minimum in fp16.
func errBound(typ Type, x []float32) float64 {
	const h = 0x1p-10 // fp16 relative rounding, doubled for slack
	lo, hi := minMax(x)
	amax := float64(abs32(absMaxSigned(x)))
	switch typ {
	case Q4_0:
		return amax/8 + 8*amax/8*h
	case Q5_0:
		return amax/16 + 16*amax/16*h
	case Q8_0:
		return amax/127*0.5 + amax*h
	case Q4_1, Q5_1:
		levels := 15.0
		if typ == Q5_1 {
			levels = 31
		}
		d := float64(hi-lo) / levels
		return d/2 + float64(hi-lo)*h + math.Abs(float64(lo))*h
	case MXFP4:
		// With d = 2^(floor(log2 amax)-3), amax lies in [8d, 16d) and the
		// grid tops out at 12d (gaps up to 4d), so the error stays under 4d.
		return amax / 4
	}
	return 0
}

func TestBlockRoundTripError(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range blockTypes {
		for _, c := range blockInputCases() {
			if c.name == "edge" || c.name == "overflow" {
				continue // fp16 overflow/underflow by design there
			}
			t.Run(typ.String()+"/"+c.name, func(t *testing.T) {
				x := c.gen(rng, 32*512)
				y := dequantizeOrFatal(t, typ, quantizeOrFatal(t, typ, x), len(x))
				for b := 0; b < len(x); b += 32 {
					blk := x[b : b+32]
					if amax := float64(abs32(absMaxSigned(blk))); amax < 1e-2 || amax > 6e4 {
						continue // the scale is subnormal or out of range in fp16
					}
					bound := errBound(typ, blk) * (1 + 1e-6)
					for j := range blk {
						if e := math.Abs(float64(blk[j] - y[b+j])); e > bound || math.IsNaN(float64(y[b+j])) {
							t.Fatalf("block %d elem %d: %g -> %g, error %g > bound %g", b/32, j, blk[j], y[b+j], e, bound)
						}
					}
				}
			})
		}
	}
}

func TestBlockZeros(t *testing.T) {
	for _, typ := range append(blockTypes, Q8_1, F32, F16, BF16) {
		t.Run(typ.String(), func(t *testing.T) {
			x := make([]float32, 64)
			q := quantizeOrFatal(t, typ, x)
			if !CanDequantize(typ) {
				for i, v := range q {
					// Q4_0/Q5_0 store the offset code; Q8_1 has none.
					if v != 0 {
						t.Fatalf("byte %d = %#x, want 0", i, v)
					}
				}
				return
			}
			y := dequantizeOrFatal(t, typ, q, len(x))
			if diff := cmp.Diff(x, y); diff != "" {
				t.Errorf("zeros (-in +out):\n%s", diff)
			}
		})
	}
}

// TestVecDotMatchesDequantized checks every dot product against the dot of
// the dequantized rows: same data, only the summation order differs.
func TestVecDotMatchesDequantized(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 32 * 64
	for _, typ := range append(blockTypes, F32, F16, BF16) {
		t.Run(typ.String(), func(t *testing.T) {
			vdt := typ.VecDotType()
			for trial := 0; trial < 20; trial++ {
				w := quantizeOrFatal(t, typ, fillRand(n, func() float32 { return float32(rng.NormFloat64()) }))
				a := quantizeOrFatal(t, vdt, fillRand(n, func() float32 { return float32(rng.NormFloat64()) }))
				got, err := VecDot(typ, n, w, a)
				if err != nil {
					t.Fatal(err)
				}
				wf := dequantizeOrFatal(t, typ, w, n)
				af := activationValues(t, vdt, a, n)
				var want, mag float64
				for i := range wf {
					want += float64(wf[i]) * float64(af[i])
					mag += math.Abs(float64(wf[i]) * float64(af[i]))
				}
				// Q8_1's block sum s is stored in fp16 and enters through the minimum.
				if tol := 2e-3 * mag; math.Abs(float64(got)-want) > tol {
					t.Fatalf("trial %d: VecDot = %g, dequantized dot = %g (tolerance %g)", trial, got, want, tol)
				}
			}
		})
	}
}

// activationValues decodes an activation row; Q8_1 has no dequantize in
// ggml, so its q*d values are decoded here.
func activationValues(t *testing.T, typ Type, a []byte, n int) []float32 {
	t.Helper()
	if typ != Q8_1 {
		return dequantizeOrFatal(t, typ, a, n)
	}
	y := make([]float32, n)
	for b := 0; b < n/32; b++ {
		d := f16At(a[36*b:])
		for j := 0; j < 32; j++ {
			y[32*b+j] = float32(int8(a[36*b+4+j])) * d
		}
	}
	return y
}

func TestQ8_1BlockSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	x := fillRand(32*16, func() float32 { return float32(rng.NormFloat64()) })
	q := quantizeOrFatal(t, Q8_1, x)
	q0 := quantizeOrFatal(t, Q8_0, x)
	for b := 0; b < 16; b++ {
		blk := q[36*b : 36*b+36]
		// Same scale and codes as Q8_0, with s = sum(q)*d (unrounded d) in between.
		if diff := cmp.Diff(q0[34*b:34*b+34], append(blk[:2:2], blk[4:]...)); diff != "" {
			t.Fatalf("block %d differs from Q8_0 (-q8_0 +q8_1):\n%s", b, diff)
		}
		var sum int32
		for _, v := range blk[4:] {
			sum += int32(int8(v))
		}
		d := absMax(x[32*b:32*b+32]) / 127
		if got, want := le16(blk[2:]), FP32ToFP16(float32(sum)*d); got != want {
			t.Errorf("block %d: s = %#04x, want %#04x", b, got, want)
		}
	}
}

func TestBlockSizeErrors(t *testing.T) {
	for _, typ := range blockTypes {
		t.Run(typ.String(), func(t *testing.T) {
			if err := Quantize(typ, make([]float32, 31), make([]byte, 64)); err == nil {
				t.Error("Quantize of 31 elements succeeded")
			}
			if err := Dequantize(typ, make([]byte, typ.TypeSize()-1), make([]float32, 32)); err == nil {
				t.Error("Dequantize from a short buffer succeeded")
			}
			if _, err := VecDot(typ, 64, make([]byte, 2*typ.TypeSize()), make([]byte, typ.VecDotType().TypeSize())); err == nil {
				t.Error("VecDot with a short activation row succeeded")
			}
		})
	}
}
