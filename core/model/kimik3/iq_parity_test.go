package kimik3_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/tools/parity"
)

// TestParityIQExperts runs llama-quantize'd copies of a synthetic file whose
// routed experts are in each grid IQ type (the rest Q8_0, quantized with an
// importance matrix as llama-quantize requires for them) through k3's reference
// kernels and llama.cpp's scalar CPU code: logits within 1e-4 and greedy
// continuations identical.
func TestParityIQExperts(t *testing.T) {
	if testing.Short() {
		t.Skip("quantizes a model and decodes on both sides; skipped with -short")
	}
	ref := parity.Require(t)
	for _, typ := range []quant.Type{quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ3_XXS, quant.IQ3_S,
		quant.IQ1_S, quant.IQ1_M} {
		t.Run(typ.String(), func(t *testing.T) {
			c := small()
			c.NLatent = 256 // IQ types need rows of whole 256-blocks
			src := writeModel(t, c)
			path := filepath.Join(t.TempDir(), "iq.gguf")
			im := expertImatrix(t, src)
			if err := ref.QuantizeModel(src, path, 7 /* LLAMA_FTYPE_MOSTLY_Q8_0 */, parity.QuantizeOptions{
				Imatrix: im,
				Types:   map[string]quant.Type{`ffn_(gate|up|down)_exps\.weight`: typ},
				Threads: 2,
			}); err != nil {
				t.Fatal(err)
			}
			checkExpertTypes(t, path, typ)
			checkExpertBytes(t, src, path, typ, im)

			m := load(t, path, 2)
			toks := prompt(70, c.NVocab)
			got := batchLogits(t, m, toks, 512)
			want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: parity.Generic})
			if err != nil {
				t.Fatal(err)
			}
			d, at := maxAbs(want, got)
			t.Logf("%s experts n=70 vs generic: max|Δlogit| = %.3g (at pos %d)", typ, d, at)
			if d > 1e-4 {
				t.Errorf("%s experts vs generic: max|Δlogit| %.3g at position %d", typ, d, at)
			}

			short := toks[:9]
			r := engine.NewRunner(m, engine.Batch, 0)
			last, err := r.Prefill(short, false)
			if err != nil {
				t.Fatal(err)
			}
			gotG, err := r.Greedy(last, 32)
			if err != nil {
				t.Fatal(err)
			}
			wantG, err := ref.GreedyOpts(path, short, 32, parity.LogitsOptions{Threads: 2, CPU: parity.Generic})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantG, gotG[:len(wantG)]); diff != "" {
				t.Errorf("greedy 32 vs generic (-llama.cpp +k3):\n%s", diff)
			}
		})
	}
}

// expertImatrix makes an importance matrix for the routed expert tensors of
// the file at path: per expert, one positive weight per column, varying
// over two orders of magnitude as real activation statistics do.
func expertImatrix(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string][]float32{}
	for _, ti := range f.Tensors() {
		if !strings.Contains(ti.Name, "_exps.") {
			continue
		}
		n := ti.Shape[0] * ti.Shape[2]
		v := make([]float32, n)
		for i := range v {
			h := uint32(i)*2654435761 ^ uint32(len(ti.Name))*40503
			v[i] = 0.01 + float32(h%1000)/1000*float32(1+h%7)
		}
		m[ti.Name] = v
	}
	if len(m) == 0 {
		t.Fatal("no routed expert tensors")
	}
	return m
}

func checkExpertTypes(t *testing.T, path string, typ quant.Type) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for _, ti := range f.Tensors() {
		if strings.Contains(ti.Name, "_exps.") {
			if ti.Type != typ {
				t.Fatalf("%s is %s, want %s", ti.Name, ti.Type, typ)
			}
			n++
		}
	}
	t.Logf("%d routed expert tensors in %s", n, typ)
}

// checkExpertBytes quantizes the routed experts of the F32 file src with
// k3's reference quantizer, each expert with its slice of the importance
// matrix, and compares with the bytes llama-quantize wrote to dst.
func checkExpertBytes(t *testing.T, src, dst string, typ quant.Type, im map[string][]float32) {
	t.Helper()
	fs, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	fd, err := gguf.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	for _, ti := range fs.Tensors() {
		if !strings.Contains(ti.Name, "_exps.") {
			continue
		}
		raw, err := fs.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, len(raw)/4)
		if err := quant.Dequantize(quant.F32, raw, x); err != nil {
			t.Fatal(err)
		}
		cols, rows, experts := int(ti.Shape[0]), int(ti.Shape[1]), int(ti.Shape[2])
		rb, err := quant.RowSize(typ, int64(cols))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, int(rb)*rows*experts)
		per := int(rb) * rows
		for e := 0; e < experts; e++ {
			if err := quant.QuantizeImatrix(typ, x[e*rows*cols:(e+1)*rows*cols], got[e*per:(e+1)*per], cols,
				im[ti.Name][e*cols:(e+1)*cols]); err != nil {
				t.Fatal(err)
			}
		}
		td, ok := fd.Tensor(ti.Name)
		if !ok {
			t.Fatalf("%s missing from the quantized file", ti.Name)
		}
		want, err := fd.TensorData(td)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: k3's %s quantization differs from llama-quantize's", ti.Name, typ)
		}
	}
}
