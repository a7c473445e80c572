package parity

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/quant"
)

// f16 decodes an IEEE half, independently of ggml, to check its to_float.
func f16(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	man := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * float32(math.Ldexp(man, -24))
	case 0x1f:
		if man != 0 {
			return float32(math.NaN())
		}
		return sign * float32(math.Inf(1))
	}
	return sign * float32(math.Ldexp(1024+man, exp-25))
}

func randFloats(rng *rand.Rand, n int, scale float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64()) * scale
	}
	return out
}

func TestDequantizeF16(t *testing.T) {
	r := Require(t)
	bits := []uint16{0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x0400, 0x3555, 0x7c00, 0xfc00}
	data := make([]byte, 2*len(bits))
	want := make([]float32, len(bits))
	for i, b := range bits {
		binary.LittleEndian.PutUint16(data[2*i:], b)
		want[i] = f16(b)
	}
	got, err := r.Dequantize(quant.F16, len(bits), data)
	if err != nil {
		t.Fatal(err)
	}
	// Compare bit patterns so -0 and +0 are told apart.
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("f16 %#04x: got %g, want %g", bits[i], got[i], want[i])
		}
	}
	if want[2] != 1 || want[3] != -2 || want[4] != 65504 {
		t.Fatalf("test decoder is wrong: %v", want[:5])
	}
}

func TestDequantizeQ8_0Block(t *testing.T) {
	r := Require(t)
	// d = 0.5 (f16 0x3800), qs = -16..15.
	block := make([]byte, 34)
	binary.LittleEndian.PutUint16(block, 0x3800)
	want := make([]float32, 32)
	for i := range 32 {
		block[2+i] = byte(int8(i - 16))
		want[i] = 0.5 * float32(i-16)
	}
	got, err := r.Dequantize(quant.Q8_0, 32, block)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("q8_0 block (-want +got):\n%s", d)
	}
}

func TestQuantizeRoundTrip(t *testing.T) {
	r := Require(t)
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		typ     quant.Type
		nPerRow int
		rows    int
		// maxErr bounds |x - dequant(quant(x))| relative to the block's absmax.
		maxErr float64
	}{
		{quant.Q8_0, 64, 3, 0.5/127 + 1e-3},
		{quant.Q4_0, 64, 2, 0.5/8 + 1e-3},
		{quant.Q4_K, 256, 2, 0.15}, // sub-block ranges span up to 2 amax, in 15 steps
		{quant.F16, 8, 2, 1e-3},
	}
	for _, tc := range tests {
		t.Run(tc.typ.String(), func(t *testing.T) {
			src := randFloats(rng, tc.nPerRow*tc.rows, 3)
			q, err := r.Quantize(tc.typ, src, tc.nPerRow)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := quant.RowSize(tc.typ, int64(len(src)))
			if int64(len(q)) != want {
				t.Fatalf("quantized %d elements to %d bytes, want %d", len(src), len(q), want)
			}
			back, err := r.Dequantize(tc.typ, len(src), q)
			if err != nil {
				t.Fatal(err)
			}
			bs := tc.typ.BlockSize()
			if bs == 1 {
				bs = len(src)
			}
			for b := 0; b < len(src); b += bs {
				amax := 0.0
				for _, x := range src[b : b+bs] {
					amax = math.Max(amax, math.Abs(float64(x)))
				}
				for i := b; i < b+bs; i++ {
					if e := math.Abs(float64(src[i] - back[i])); e > tc.maxErr*amax {
						t.Fatalf("element %d: %g came back as %g (error %g > %g)", i, src[i], back[i], e, tc.maxErr*amax)
					}
				}
			}
		})
	}
}

// TestLargeInput checks that 100k blocks pass through one call.
func TestLargeInput(t *testing.T) {
	r := Require(t)
	const blocks = 100_000
	src := make([]float32, blocks*32)
	for i := range src {
		src[i] = float32(i%64) - 31
	}
	q, err := r.Quantize(quant.Q8_0, src, 32*1000)
	if err != nil {
		t.Fatal(err)
	}
	back, err := r.Dequantize(quant.Q8_0, len(src), q)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src {
		if math.Abs(float64(back[i]-src[i])) > 0.2 {
			t.Fatalf("element %d: %g came back as %g", i, src[i], back[i])
		}
	}
}

func TestVecDotF32(t *testing.T) {
	r := Require(t)
	rng := rand.New(rand.NewPCG(3, 4))
	const n, rows = 100, 5
	w, a := randFloats(rng, n*rows, 1), randFloats(rng, n*rows, 1)
	for _, variant := range []string{Generic, Native} {
		t.Run(variant, func(t *testing.T) {
			got, err := r.VecDot(quant.F32, n, rows, f32Bytes(w), f32Bytes(a), variant)
			if err != nil {
				t.Fatal(err)
			}
			for i := range rows {
				var want float64
				for j := range n {
					want += float64(w[i*n+j]) * float64(a[i*n+j])
				}
				if math.Abs(float64(got[i])-want) > 1e-4*(1+math.Abs(want)) {
					t.Errorf("row %d: got %g, want %g", i, got[i], want)
				}
			}
		})
	}
}

// TestVecDotQ8_0 checks the quantized dot product against the integer sum
// computed here from the blocks' bytes. The generic variant needs
// ggml_cpu_init for its fp16 table; without it every row would read 0.
func TestVecDotQ8_0(t *testing.T) {
	r := Require(t)
	rng := rand.New(rand.NewPCG(5, 6))
	const n, rows = 128, 3
	wq, err := r.Quantize(quant.Q8_0, randFloats(rng, n*rows, 1), n)
	if err != nil {
		t.Fatal(err)
	}
	for _, variant := range []string{Generic, Native} {
		t.Run(variant, func(t *testing.T) {
			aq, err := r.FromFloat(quant.Q8_0, randFloats(rng, n*rows, 1), variant)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.VecDot(quant.Q8_0, n, rows, wq, aq, variant)
			if err != nil {
				t.Fatal(err)
			}
			for i := range rows {
				var want float64
				for b := i * n / 32; b < (i+1)*n/32; b++ {
					wb, ab := wq[34*b:34*b+34], aq[34*b:34*b+34]
					sum := 0
					for j := 2; j < 34; j++ {
						sum += int(int8(wb[j])) * int(int8(ab[j]))
					}
					want += float64(f16(binary.LittleEndian.Uint16(wb))) * float64(f16(binary.LittleEndian.Uint16(ab))) * float64(sum)
				}
				if want == 0 || math.Abs(float64(got[i])-want) > 1e-5*math.Abs(want) {
					t.Errorf("row %d: got %g, want %g", i, got[i], want)
				}
			}
		})
	}
}

func TestFromFloatQ8K(t *testing.T) {
	r := Require(t)
	rng := rand.New(rand.NewPCG(7, 8))
	src := randFloats(rng, 512, 2)
	for _, variant := range []string{Generic, Native} {
		t.Run(variant, func(t *testing.T) {
			q, err := r.FromFloat(quant.Q8_K, src, variant)
			if err != nil {
				t.Fatal(err)
			}
			if len(q) != 2*292 {
				t.Fatalf("512 floats became %d bytes of q8_K, want %d", len(q), 2*292)
			}
			// block_q8_K: f32 d, 256 int8 qs, 16 int16 bsums (sums of 16 qs each).
			for b := range 2 {
				blk := q[292*b : 292*(b+1)]
				d := math.Float32frombits(binary.LittleEndian.Uint32(blk))
				for i := range 256 {
					x, back := src[256*b+i], d*float32(int8(blk[4+i]))
					if e := math.Abs(float64(x - back)); e > 0.5001*math.Abs(float64(d)) {
						t.Fatalf("element %d: %g came back as %g (d %g)", i, x, back, d)
					}
				}
				for g := range 16 {
					sum := 0
					for i := range 16 {
						sum += int(int8(blk[4+16*g+i]))
					}
					if got := int(int16(binary.LittleEndian.Uint16(blk[260+2*g:]))); got != sum {
						t.Errorf("block %d bsum %d = %d, want %d", b, g, got, sum)
					}
				}
			}
		})
	}
}

func TestTypesMatchQuantTable(t *testing.T) {
	r := Require(t)
	types, err := r.Types(Generic)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, ti := range types {
		tr, ok := ti.Type.Traits()
		if !ok {
			continue
		}
		seen++
		if tr.BlockSize != ti.BlockSize || tr.TypeSize != ti.TypeSize {
			t.Errorf("%s: k3 has block %d/%d bytes, ggml %d/%d", ti.Name, tr.BlockSize, tr.TypeSize, ti.BlockSize, ti.TypeSize)
		}
	}
	if seen < 15 {
		t.Errorf("only %d of ggml's types are known to k3: %+v", seen, types)
	}
	v, err := r.Variants()
	if err != nil {
		t.Fatal(err)
	}
	if v.Native == "" || len(v.Variants) < 2 {
		t.Errorf("variants: %+v", v)
	}
}

func TestErrors(t *testing.T) {
	r := Require(t)
	tests := []struct {
		name string
		call func() error
	}{
		{"dequant short input", func() error { _, err := r.Dequantize(quant.Q8_0, 32, make([]byte, 33)); return err }},
		{"dequant partial block", func() error { _, err := r.Dequantize(quant.Q8_0, 31, make([]byte, 34)); return err }},
		{"quantize row not whole blocks", func() error { _, err := r.Quantize(quant.Q4_K, make([]float32, 128), 128); return err }},
		{"vecdot wrong activation size", func() error {
			_, err := r.VecDot(quant.Q8_0, 32, 1, make([]byte, 34), make([]byte, 33), Generic)
			return err
		}},
		{"quantize to an activation-only type", func() error { _, err := r.Quantize(quant.Q8_K, make([]float32, 256), 256); return err }},
		{"unknown variant", func() error { _, err := r.FromFloat(quant.Q8_0, make([]float32, 32), "nosuchcpu"); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var e *Error
			if !errors.As(err, &e) || e.Exit != 2 || e.Stderr == "" {
				t.Fatalf("got %v, want a usage *Error (exit 2) with a message", err)
			}
		})
	}
}

// recordTB records what Require asks of its test instead of stopping it.
type recordTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordTB) Helper()                      {}
func (r *recordTB) Fatalf(f string, args ...any) { r.fatal = fmt.Sprintf(f, args...) }
func (r *recordTB) Skipf(f string, args ...any)  { r.skip = fmt.Sprintf(f, args...) }

func TestRequireMissing(t *testing.T) {
	t.Setenv(EnvVar, filepath.Join(t.TempDir(), "missing"))
	if _, err := Find(); err == nil {
		t.Fatal("Find succeeded with K3_PARITY naming a missing file")
	}
	for _, ci := range []string{"", "true"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			rec := &recordTB{TB: t}
			if r := Require(rec); r != nil {
				t.Fatalf("Require returned %v for a missing binary", r)
			}
			got := rec.skip
			if ci == "true" {
				got = rec.fatal
			}
			if !strings.Contains(got, "setup.sh") || !strings.Contains(got, "missing") {
				t.Errorf("skip %q, fatal %q: want the CI=%q message to name setup.sh and the path", rec.skip, rec.fatal, ci)
			}
		})
	}
}

func f32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, f := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}
