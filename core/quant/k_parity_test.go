package quant_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/tools/parity"
)

// Parity of the K-quants with libggml: bit-identical dequantize, reference
// quantize, Q8_K activation quantization and generic dot products. Every
// operation is one k3ref call per type over all input families.

var kTypes = []quant.Type{quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K}

// kParityBlocks is the number of super-blocks per type and operation:
// 100k by default (-short: 4k), or $K3_K_PARITY_BLOCKS.
func kParityBlocks(t *testing.T) int {
	if s := os.Getenv("K3_K_PARITY_BLOCKS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("K3_K_PARITY_BLOCKS=%q: want a positive integer", s)
		}
		return n
	}
	if testing.Short() {
		return 4000
	}
	return 100_000
}

// slowQuantizeBlocks is how many super-blocks the quantize parity of the
// IQ types with a search (the grid types, and IQ4 with an importance
// matrix) checks: both sides take about a millisecond a block, so CI
// checks 8000 (-short 400) and K3_K_PARITY_BLOCKS=100000 runs the full
// check (some 40 minutes of CPU; passed at 98,608 blocks per variant when
// these types landed).
func slowQuantizeBlocks(t *testing.T) int {
	if os.Getenv("K3_K_PARITY_BLOCKS") != "" {
		return kParityBlocks(t)
	}
	if testing.Short() {
		return 400
	}
	return 8000
}

const kRowBlocks = 16 // super-blocks per row in the quantize and dot-product calls

func TestKQuantParity(t *testing.T) {
	r := parity.Require(t)
	nb := kParityBlocks(t) / kRowBlocks * kRowBlocks
	x, family := kInputs(1, nb)
	nb = len(family) / kRowBlocks * kRowBlocks
	x, family = x[:nb*quant.QK_K], family[:nb]

	// Activations for the dot products: the same families, shuffled, through
	// ggml's own Q8_K quantization, then raw Q8_K blocks.
	xa, _ := kInputs(2, nb)
	rng := rand.New(rand.NewPCG(3, 3))
	rng.Shuffle(len(xa)/quant.QK_K, func(i, j int) {
		a, b := xa[i*quant.QK_K:(i+1)*quant.QK_K], xa[j*quant.QK_K:(j+1)*quant.QK_K]
		for k := range a {
			a[k], b[k] = b[k], a[k]
		}
	})
	act, err := r.FromFloat(quant.Q8_K, xa[:nb*quant.QK_K], parity.Generic)
	if err != nil {
		t.Fatal(err)
	}
	act = append(act, rawBlocks(rng, quant.Q8_K, nb)...)

	for _, typ := range kTypes {
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

			// Dequantize and dot products: ggml's blocks, then raw ones.
			w := append(ref, rawBlocks(rng, typ, nb)...)
			checkDequantize(t, r, typ, w)
			checkVecDot(t, r, typ, w, act)
		})
	}
}

func TestQ8KParity(t *testing.T) {
	r := parity.Require(t)
	nb := kParityBlocks(t)
	x, family := kInputs(4, nb)
	got := make([]byte, len(family)*quant.Q8_K.TypeSize())
	if err := quant.Quantize(quant.Q8_K, x, got); err != nil {
		t.Fatal(err)
	}
	ref, err := r.FromFloat(quant.Q8_K, x, parity.Generic)
	if err != nil {
		t.Fatal(err)
	}
	diffBlocks(t, "from_float generic", quant.Q8_K.TypeSize(), got, ref, family)
	native, err := r.FromFloat(quant.Q8_K, x, parity.Native)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(native, ref) {
		t.Logf("from_float native: %d blocks byte-identical with generic", len(family))
	} else {
		t.Logf("from_float native differs from generic (not asserted)")
	}
	// ggml registers no to_float for Q8_K (dequantize_row_q8_K is not in its
	// type traits), so k3's Q8_K dequantize has no reference to meet here.
}

// diffBlocks fails on blocks that differ, naming the first few and how many
// of each input family differ.
func diffBlocks(t *testing.T, what string, size int, got, want []byte, family []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d bytes, reference %d", what, len(got), len(want))
	}
	bad := map[string]int{}
	n := 0
	for b := 0; b*size < len(want); b++ {
		g, w := got[b*size:(b+1)*size], want[b*size:(b+1)*size]
		if bytes.Equal(g, w) {
			continue
		}
		n++
		bad[family[b]]++
		if n <= 3 {
			t.Errorf("%s: block %d (%s) differs:\n got % x\nwant % x", what, b, family[b], g, w)
		}
	}
	if n > 0 {
		t.Errorf("%s: %d of %d blocks differ, by family: %v", what, n, len(want)/size, bad)
		return
	}
	t.Logf("%s: %d blocks byte-identical", what, len(want)/size)
}

func checkDequantize(t *testing.T, r *parity.Ref, typ quant.Type, data []byte) {
	t.Helper()
	n := len(data) / typ.TypeSize() * quant.QK_K
	want, err := r.Dequantize(typ, n, data)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := quant.Dequantize(typ, data, got); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad++; bad <= 3 {
				t.Errorf("dequantize: element %d (block %d) = %g (%#08x), reference %g (%#08x)",
					i, i/quant.QK_K, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
	if bad > 0 {
		t.Errorf("dequantize: %d of %d elements differ", bad, n)
		return
	}
	t.Logf("dequantize: %d elements (%d blocks) bit-identical", n, n/quant.QK_K)
}

// checkVecDot compares the dot products of the rows of w and a with the
// generic (scalar) reference bit for bit, and logs how far the native SIMD
// variant is from them.
func checkVecDot(t *testing.T, r *parity.Ref, typ quant.Type, w, a []byte) {
	t.Helper()
	n := kRowBlocks * quant.QK_K
	rows := len(w) / typ.TypeSize() / kRowBlocks
	got := make([]float32, rows)
	ws, as := kRowBlocks*typ.TypeSize(), kRowBlocks*quant.Q8_K.TypeSize()
	for i := range got {
		v, err := quant.VecDot(typ, n, w[i*ws:(i+1)*ws], a[i*as:(i+1)*as])
		if err != nil {
			t.Fatal(err)
		}
		got[i] = v
	}
	generic, err := r.VecDot(typ, n, rows, w[:rows*ws], a[:rows*as], parity.Generic)
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(generic[i]) {
			if bad++; bad <= 3 {
				t.Errorf("vec_dot: row %d = %g, generic reference %g", i, got[i], generic[i])
			}
		}
	}
	if bad > 0 {
		t.Errorf("vec_dot: %d of %d rows differ from the generic reference", bad, rows)
	} else {
		t.Logf("vec_dot: %d rows of %d elements bit-identical with generic", rows, n)
	}
	native, err := r.VecDot(typ, n, rows, w[:rows*ws], a[:rows*as], parity.Native)
	if err != nil {
		t.Fatal(err)
	}
	mag := termMagnitudes(t, typ, n, w[:rows*ws], a[:rows*as])
	half := rows / 2 // rows before half come from ggml's quantizers, the rest are raw blocks
	t.Logf("vec_dot native vs k3, quantized rows: %s", relDiffSummary(got[:half], native[:half], mag[:half]))
	t.Logf("vec_dot native vs k3, raw rows: %s", relDiffSummary(got[half:], native[half:], mag[half:]))
}

// termMagnitudes returns, per row, the sum of |w_i*a_i| over the
// dequantized values: the scale that float rounding errors of a dot
// product are relative to, however much its terms cancel.
func termMagnitudes(t *testing.T, typ quant.Type, n int, w, a []byte) []float64 {
	t.Helper()
	ws, as := n/quant.QK_K*typ.TypeSize(), n/quant.QK_K*quant.Q8_K.TypeSize()
	wv, av := make([]float32, n), make([]float32, n)
	mag := make([]float64, len(w)/ws)
	for r := range mag {
		if err := quant.Dequantize(typ, w[r*ws:(r+1)*ws], wv); err != nil {
			t.Fatal(err)
		}
		if err := quant.Dequantize(quant.Q8_K, a[r*as:(r+1)*as], av); err != nil {
			t.Fatal(err)
		}
		for i := range wv {
			mag[r] += math.Abs(float64(wv[i]) * float64(av[i]))
		}
	}
	return mag
}

// relDiffSummary describes b against a over the rows: how many are
// bit-identical, and |b-a| relative to the row's sum of |terms| mag, as
// median, 99th percentile and maximum (non-finite rows left out).
func relDiffSummary(a, b []float32, mag []float64) string {
	same := 0
	var rel []float64
	for i := range a {
		if math.Float32bits(a[i]) == math.Float32bits(b[i]) {
			same++
		}
		d := math.Abs(float64(b[i]) - float64(a[i]))
		if mag[i] == 0 || math.IsNaN(d) || math.IsInf(d, 0) || math.IsInf(mag[i], 0) {
			continue
		}
		rel = append(rel, d/mag[i])
	}
	if len(rel) == 0 {
		return fmt.Sprintf("%d/%d identical", same, len(a))
	}
	slices.Sort(rel)
	return fmt.Sprintf("%d/%d identical; |diff|/sum|terms|: median %.3g, p99 %.3g, max %.3g",
		same, len(a), rel[len(rel)/2], rel[len(rel)*99/100], rel[len(rel)-1])
}
