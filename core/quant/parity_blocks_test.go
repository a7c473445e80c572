package quant_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/tools/parity"
)

// The types whose reference kernels live in float.go, q4.go, q5.go, q8.go and
// mxfp4.go. Q8_1 is covered as the activation type of Q4_1 and Q5_1.
var parityBlockTypes = []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q4_0, quant.Q4_1,
	quant.Q5_0, quant.Q5_1, quant.Q8_0, quant.MXFP4}

// parityRowLen is the row length of the quantize and vec_dot checks: 128
// blocks of 32, a typical small hidden size.
const parityRowLen = 4096

// TestParityBlockTypes holds every operation of the non-K types to
// libggml bit for bit, on over 100k blocks per type: dequantize,
// ggml_quantize_chunk, the CPU backend's activation quantization and its
// scalar vec_dot. It also logs how far the native (SIMD) vec_dot is from the
// scalar one, the tolerance k3's own SIMD kernels will be held to.
func TestParityBlockTypes(t *testing.T) {
	r := parity.Require(t)
	perFamily := 32 * 17408 // 6 families: 104448 blocks of 32
	if testing.Short() {
		perFamily = 32 * 1024
	}
	weights := concatInputs(quant.BlockInputs(11, perFamily))
	acts := concatInputs(quant.BlockInputs(12, perFamily))
	for _, typ := range parityBlockTypes {
		t.Run(typ.String(), func(t *testing.T) {
			t.Parallel()
			w := checkQuantizeParity(t, r, typ, weights, parityRowLen)
			checkDequantizeParity(t, r, typ, w)
			a := checkFromFloatParity(t, r, typ.VecDotType(), acts)
			checkVecDotParity(t, r, typ, parityRowLen, w, a)
			// Short rows: one and three blocks.
			bs := typ.BlockSize() * 32
			if typ.BlockSize() == 32 {
				bs = 32
			}
			for _, n := range []int{bs, 3 * bs} {
				checkVecDotParity(t, r, typ, n, w[:rowBytes(t, typ, n*64)], a[:rowBytes(t, typ.VecDotType(), n*64)])
			}
			// Random bytes on both sides: every code, and scales of every
			// magnitude including inf and NaN.
			rng := rand.New(rand.NewPCG(uint64(typ), 7))
			checkVecDotParity(t, r, typ, parityRowLen,
				randomBytes(rng, rowBytes(t, typ, 64*parityRowLen)),
				randomBytes(rng, rowBytes(t, typ.VecDotType(), 64*parityRowLen)))
		})
	}
}

// TestParityMXFP4Exponent walks the block maximum across every binade of
// float32, subnormals included, at and just around each power of two, where
// floor(log2f(amax)) decides the shared exponent and the byte conversion
// wraps for tiny maxima.
func TestParityMXFP4Exponent(t *testing.T) {
	r := parity.Require(t)
	var x []float32
	for k := -149; k <= 127; k++ {
		p := math.Ldexp(1, k)
		for _, f := range []float64{p, p * (1 - 0x1p-24), p * (1 - 0x1p-23), p * (1 + 0x1p-23), p * 1.5} {
			blk := make([]float32, 32)
			blk[7] = float32(f)
			blk[20] = -float32(f) / 3
			blk[31] = float32(f) / 7
			x = append(x, blk...)
		}
	}
	checkQuantizeParity(t, r, quant.MXFP4, x, 32)
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func concatInputs(in []quant.BlockInput) []float32 {
	var x []float32
	for _, b := range in {
		x = append(x, b.X...)
	}
	return x
}

func rowBytes(t *testing.T, typ quant.Type, n int) int {
	t.Helper()
	b, err := quant.RowSize(typ, int64(n))
	if err != nil {
		t.Fatal(err)
	}
	return int(b)
}

// checkQuantizeParity compares quant.Quantize with ggml_quantize_chunk and
// returns the quantized rows.
func checkQuantizeParity(t *testing.T, r *parity.Ref, typ quant.Type, x []float32, rowLen int) []byte {
	t.Helper()
	got := make([]byte, rowBytes(t, typ, len(x)))
	if err := quant.Quantize(typ, x, got); err != nil {
		t.Fatal(err)
	}
	want, err := r.Quantize(typ, x, rowLen)
	if err != nil {
		t.Fatalf("reference quantize: %v", err)
	}
	compareBlocks(t, "quantize", typ, got, want, x)
	return got
}

// checkDequantizeParity decodes the quantized rows plus blocks of random
// bytes (every code, and scales of every magnitude, inf and NaN).
func checkDequantizeParity(t *testing.T, r *parity.Ref, typ quant.Type, q []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(typ), 99))
	data := append(append([]byte(nil), q...), randomBytes(rng, 20000*typ.TypeSize())...)
	n := len(data) / typ.TypeSize() * typ.BlockSize()
	got := make([]float32, n)
	if err := quant.Dequantize(typ, data, got); err != nil {
		t.Fatal(err)
	}
	var want []float32
	if typ == quant.F32 {
		// ggml has no to_float for f32: its data is the value.
		want = make([]float32, n)
		for i := range want {
			want[i] = math.Float32frombits(uint32(data[4*i]) | uint32(data[4*i+1])<<8 | uint32(data[4*i+2])<<16 | uint32(data[4*i+3])<<24)
		}
	} else {
		var err error
		if want, err = r.Dequantize(typ, n, data); err != nil {
			t.Fatalf("reference dequantize: %v", err)
		}
	}
	compareFloats(t, "dequantize", got, want, typ.BlockSize(), false)
}

// checkFromFloatParity compares quant.Quantize of the activation type with
// the generic CPU backend's from_float (the activation quantization of
// mul_mat), logs how many blocks the native variant quantizes differently,
// and returns the activation rows.
func checkFromFloatParity(t *testing.T, r *parity.Ref, vdt quant.Type, x []float32) []byte {
	t.Helper()
	got := make([]byte, rowBytes(t, vdt, len(x)))
	if err := quant.Quantize(vdt, x, got); err != nil {
		t.Fatal(err)
	}
	want, err := r.FromFloat(vdt, x, parity.Generic)
	if err != nil {
		t.Fatalf("reference from_float: %v", err)
	}
	compareBlocks(t, "from_float "+vdt.String(), vdt, got, want, x)
	native, err := r.FromFloat(vdt, x, parity.Native)
	if err != nil {
		t.Fatalf("reference native from_float: %v", err)
	}
	bs := vdt.TypeSize()
	differ := 0
	for i := 0; i < len(got); i += bs {
		if string(native[i:i+bs]) != string(got[i:i+bs]) {
			differ++
		}
	}
	t.Logf("from_float %s: native differs from generic in %d of %d blocks", vdt, differ, len(got)/bs)
	return got
}

// checkVecDotParity dots weight row i of w with activation row i of a, n
// elements each, and compares with the generic CPU backend bit for bit, then
// reports the native variant's deviation.
func checkVecDotParity(t *testing.T, r *parity.Ref, typ quant.Type, n int, w, a []byte) {
	t.Helper()
	wrs, ars := rowBytes(t, typ, n), rowBytes(t, typ.VecDotType(), n)
	rows := min(len(w)/wrs, len(a)/ars)
	w, a = w[:rows*wrs], a[:rows*ars]
	got := make([]float32, rows)
	for i := range got {
		var err error
		if got[i], err = quant.VecDot(typ, n, w[i*wrs:(i+1)*wrs], a[i*ars:(i+1)*ars]); err != nil {
			t.Fatal(err)
		}
	}
	want, err := r.VecDot(typ, n, rows, w, a, parity.Generic)
	if err != nil {
		t.Fatalf("reference vec_dot: %v", err)
	}
	// When two NaNs meet in a sum, x86 keeps the payload of whichever operand
	// the compiler put first, which IEEE 754 leaves open: for dot products
	// (random bytes with NaN scales, overflowing blocks) any NaN matches any
	// NaN. Every other result, dequantized NaNs included, must match in bits.
	compareFloats(t, fmt.Sprintf("vec_dot n=%d", n), got, want, 1, true)

	native, err := r.VecDot(typ, n, rows, w, a, parity.Native)
	if err != nil {
		t.Fatalf("reference native vec_dot: %v", err)
	}
	mags := absDotMagnitudes(t, typ, n, rows, w, a)
	var same, nonFinite int
	var maxRel, maxNorm float64
	for i := range want {
		if math.Float32bits(native[i]) == math.Float32bits(want[i]) {
			same++
			continue
		}
		if isNonFinite(native[i]) || isNonFinite(want[i]) {
			nonFinite++ // rows whose scales overflow fp16 (the edge family)
			continue
		}
		d := math.Abs(float64(native[i]) - float64(want[i]))
		if want[i] != 0 {
			maxRel = max(maxRel, d/math.Abs(float64(want[i])))
		}
		if mags[i] > 0 {
			maxNorm = max(maxNorm, d/mags[i])
		}
	}
	t.Logf("vec_dot %s n=%d rows=%d: native == generic in %d rows, differently inf/NaN in %d; max |native-generic|/|generic| = %.3g, max |native-generic|/sum|w*a| = %.3g",
		typ, n, rows, same, nonFinite, maxRel, maxNorm)
}

func isNonFinite(f float32) bool { return math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) }

// absDotMagnitudes returns sum |w_i*a_i| per row from the dequantized rows,
// the scale against which a reordered float sum should be judged.
func absDotMagnitudes(t *testing.T, typ quant.Type, n, rows int, w, a []byte) []float64 {
	t.Helper()
	wf := make([]float32, n*rows)
	if err := quant.Dequantize(typ, w, wf); err != nil {
		t.Fatal(err)
	}
	af := decodeActivations(t, typ.VecDotType(), a, n*rows)
	out := make([]float64, rows)
	for i := range wf {
		out[i/n] += math.Abs(float64(wf[i]) * float64(af[i]))
	}
	return out
}

// decodeActivations decodes activation rows; Q8_1 has no to_float, so its
// q*d values are decoded here.
func decodeActivations(t *testing.T, typ quant.Type, a []byte, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	if typ != quant.Q8_1 {
		if err := quant.Dequantize(typ, a, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for b := 0; b < n/32; b++ {
		d := quant.FP16ToFP32(uint16(a[36*b]) | uint16(a[36*b+1])<<8)
		for j := 0; j < 32; j++ {
			out[32*b+j] = float32(int8(a[36*b+4+j])) * d
		}
	}
	return out
}

// compareBlocks reports quantized blocks that differ, with their inputs.
func compareBlocks(t *testing.T, what string, typ quant.Type, got, want []byte, x []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, reference %d", what, len(got), len(want))
	}
	bs, be := typ.TypeSize(), typ.BlockSize()
	var bad []int
	for i := 0; i < len(got); i += bs {
		if string(got[i:i+bs]) != string(want[i:i+bs]) {
			bad = append(bad, i/bs)
		}
	}
	if len(bad) == 0 {
		return
	}
	for _, b := range bad[:min(3, len(bad))] {
		t.Errorf("%s: block %d: got %x, reference %x; input %v", what, b,
			got[b*bs:(b+1)*bs], want[b*bs:(b+1)*bs], x[b*be:(b+1)*be])
	}
	t.Fatalf("%s: %d of %d blocks differ", what, len(bad), len(got)/bs)
}

// compareFloats compares bit patterns, so -0/+0 and NaN payloads count,
// unless anyNaN lets any NaN stand for any other.
func compareFloats(t *testing.T, what string, got, want []float32, group int, anyNaN bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, reference %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if anyNaN && got[i] != got[i] && want[i] != want[i] {
				continue
			}
			if bad < 3 {
				t.Errorf("%s: value %d (group %d): got %g (%#08x), reference %g (%#08x)", what, i, i/group,
					got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d values differ", what, bad, len(got))
	}
}
