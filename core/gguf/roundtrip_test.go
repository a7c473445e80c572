package gguf

import (
	"bytes"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/quant"
)

// knownTypes lists every tensor type k3 knows.
func knownTypes() []quant.Type {
	var out []quant.Type
	for t := quant.Type(0); t < 64; t++ {
		if t.Known() {
			out = append(out, t)
		}
	}
	return out
}

// allValueKVs has one key per scalar type and per array element type,
// including empty arrays and awkward strings.
func allValueKVs() []KV {
	return []KV{
		{"general.architecture", Str("llama")},
		{"t.u8", U8(200)},
		{"t.i8", I8(-100)},
		{"t.u16", U16(60000)},
		{"t.i16", I16(-30000)},
		{"t.u32", U32(4000000000)},
		{"t.i32", I32(-2000000000)},
		{"t.f32", F32(-1.5e-7)},
		{"t.bool.true", Bool(true)},
		{"t.bool.false", Bool(false)},
		{"t.str", Str("héllo\x00wörld ✓")},
		{"t.str.empty", Str("")},
		{"t.u64", U64(1<<64 - 1)},
		{"t.i64", I64(-1 << 63)},
		{"t.f64", F64(3.141592653589793)},
		{"a.u8", U8s([]uint8{0, 1, 255})},
		{"a.i8", I8s([]int8{-128, 0, 127})},
		{"a.u16", U16s([]uint16{0, 65535})},
		{"a.i16", I16s([]int16{-32768, 32767})},
		{"a.u32", U32s([]uint32{1, 2, 3})},
		{"a.i32", I32s([]int32{0, -1, 8, 0})},
		{"a.f32", F32s([]float32{0.5, -2, 1e30})},
		{"a.bool", Bools([]bool{true, false, true})},
		{"a.str", Strs([]string{"a", "", "<|im_end|>", "Ġthe"})},
		{"a.u64", U64s([]uint64{1 << 63})},
		{"a.i64", I64s([]int64{-5, 5})},
		{"a.f64", F64s([]float64{1e-300, math.Copysign(0, -1)})},
		{"a.empty.str", Strs([]string{})},
		{"a.empty.i32", I32s([]int32{})},
	}
}

// specFor returns a small 2-row tensor of type t.
func specFor(t quant.Type) TensorSpec {
	return TensorSpec{Name: "w." + t.String(), Type: t, Shape: []int64{int64(2 * t.BlockSize()), 3}}
}

// randomData returns deterministic bytes for each spec.
func randomData(t testing.TB, specs []TensorSpec, seed uint64) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([][]byte, len(specs))
	for i, s := range specs {
		n, err := tensorBytes(s.Type, s.Shape)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = make([]byte, n)
		for j := range out[i] {
			out[i][j] = byte(rng.Uint32())
		}
	}
	return out
}

func writeModel(t testing.TB, path string, kvs []KV, specs []TensorSpec, data [][]byte, o WriteOptions) []string {
	t.Helper()
	w, err := Create(path, kvs, specs, o)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		if err := w.WriteTensor(s.Name, data[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.Paths()
}

func TestRoundTrip(t *testing.T) {
	var specs []TensorSpec
	for _, typ := range knownTypes() {
		specs = append(specs, specFor(typ))
	}
	specs = append(specs, TensorSpec{Name: "four.d", Type: quant.F16, Shape: []int64{3, 2, 2, 5}})
	data := randomData(t, specs, 1)
	kvs := allValueKVs()
	for _, align := range []int{0, 64, 4096} {
		t.Run("align"+strconv.Itoa(align), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			writeModel(t, path, kvs, specs, data, WriteOptions{Alignment: align})
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			wantKVs := kvs
			if align > DefaultAlignment {
				wantKVs = append(append([]KV(nil), kvs...), KV{"general.alignment", U32(uint32(align))})
			}
			if diff := cmp.Diff(wantKVs, f.KVs()); diff != "" {
				t.Errorf("KVs (-want +got):\n%s", diff)
			}
			checkTensors(t, f, specs, data)
			if a := f.Alignment(); align > 0 && a != int64(align) {
				t.Errorf("Alignment() = %d, want %d", a, align)
			}
		})
	}
}

// checkTensors compares f's tensors with specs and data through both the
// mmap and the pread paths.
func checkTensors(t *testing.T, f *File, specs []TensorSpec, data [][]byte) {
	t.Helper()
	got := f.Tensors()
	if len(got) != len(specs) {
		t.Fatalf("%d tensors, want %d", len(got), len(specs))
	}
	for i, s := range specs {
		ti, ok := f.Tensor(s.Name)
		if !ok {
			t.Fatalf("tensor %q missing", s.Name)
		}
		if ti.Type != s.Type || !cmp.Equal(ti.Shape, s.Shape) || ti.Size != int64(len(data[i])) {
			t.Errorf("tensor %q = %v %v %d bytes, want %v %v %d", s.Name, ti.Type, ti.Shape, ti.Size, s.Type, s.Shape, len(data[i]))
		}
		if ti.Offset%f.Alignment() != 0 {
			t.Errorf("tensor %q offset %d not aligned to %d", s.Name, ti.Offset, f.Alignment())
		}
		b, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, data[i]) {
			t.Errorf("tensor %q: mmap data differs", s.Name)
		}
		r, err := f.TensorReader(ti)
		if err != nil {
			t.Fatal(err)
		}
		b, err = io.ReadAll(r)
		if err != nil || !bytes.Equal(b, data[i]) {
			t.Errorf("tensor %q: pread data differs (err %v)", s.Name, err)
		}
	}
}

func TestAccessors(t *testing.T) {
	kvs := []KV{
		{"general.architecture", Str("kimi-k3")},
		{"general.name", Str("tiny")},
		{"kimi-k3.block_count", U32(4)},
		{"kimi-k3.expert_count", U64(896)},
		{"kimi-k3.rope.freq_base", F32(50000)},
		{"kimi-k3.attention.head_count_kv", I32s([]int32{0, 0, 0, 1})},
		{"kimi-k3.attention.head_count", U32(96)},
		{"kimi-k3.expert_weights_norm", Bool(true)},
		{"kimi-k3.swa_layers", F32s([]float32{1, 0.5})},
		{"tokenizer.ggml.tokens", Strs([]string{"a", "b"})},
		{"kimi-k3.negative", I32(-3)},
	}
	path := filepath.Join(t.TempDir(), "a.gguf")
	writeModel(t, path, kvs, nil, nil, WriteOptions{})
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"arch", f.Arch(), "kimi-k3"},
		{"uint short key", f.Uint("block_count", 0), uint64(4)},
		{"uint full key", f.Uint("kimi-k3.block_count", 0), uint64(4)},
		{"uint u64", f.Uint("expert_count", 0), uint64(896)},
		{"int", f.Int("block_count", 0), int64(4)},
		{"int negative", f.Int("negative", 0), int64(-3)},
		{"float", f.Float("rope.freq_base", 0), 50000.0},
		{"float from int", f.Float("block_count", 0), 4.0},
		{"bool", f.Bool("expert_weights_norm", false), true},
		{"string general", f.String("general.name", ""), "tiny"},
		{"strings", f.Strings("tokenizer.ggml.tokens"), []string{"a", "b"}},
		{"ints array", f.Ints("attention.head_count_kv"), []int64{0, 0, 0, 1}},
		{"ints scalar", f.Ints("attention.head_count"), []int64{96}},
		{"floats array", f.Floats("swa_layers"), []float64{1, 0.5}},
		{"floats scalar", f.Floats("rope.freq_base"), []float64{50000}},
		{"missing default", f.Uint("nope", 7), uint64(7)},
		{"missing ints", f.Ints("nope"), []int64(nil)},
		{"has", f.Has("block_count"), true},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if diff := cmp.Diff(c.want, c.got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if err := f.Err(); err != nil {
		t.Fatalf("Err() = %v before any type error", err)
	}
	// Wrong types give the default and are reported by Err.
	if got := f.Uint("negative", 9); got != 9 {
		t.Errorf("Uint of a negative i32 = %d, want the default", got)
	}
	if got := f.String("block_count", "d"); got != "d" {
		t.Errorf("String of a u32 = %q, want the default", got)
	}
	err = f.Err()
	if err == nil || !strings.Contains(err.Error(), `"kimi-k3.negative"`) || !strings.Contains(err.Error(), `"kimi-k3.block_count": want a string, have u32`) {
		t.Errorf("Err() = %v, want both type errors", err)
	}
}

func TestWriterStreamsAcrossBoundaries(t *testing.T) {
	specs := []TensorSpec{
		{Name: "a", Type: quant.F32, Shape: []int64{5}},
		{Name: "b", Type: quant.Q8_0, Shape: []int64{32, 3}},
		{Name: "c", Type: quant.F16, Shape: []int64{7, 1, 1}},
	}
	data := randomData(t, specs, 2)
	all := bytes.Join(data, nil)
	for _, split := range []SplitOptions{{}, {MaxTensors: 1}} {
		dir := t.TempDir()
		w, err := Create(filepath.Join(dir, "s.gguf"), nil, specs, WriteOptions{Split: split})
		if err != nil {
			t.Fatal(err)
		}
		// Odd-sized writes that straddle tensors (and shards).
		for p := all; len(p) > 0; {
			k := min(len(p), 13)
			if n, err := w.Write(p[:k]); err != nil || n != k {
				t.Fatalf("Write = %d, %v", n, err)
			}
			p = p[k:]
		}
		if _, err := w.Write([]byte{1}); err == nil || !strings.Contains(err.Error(), "past the last tensor") {
			t.Errorf("Write past the end: err = %v", err)
		}
		w.Close()
	}
}

func TestWriterErrors(t *testing.T) {
	good := []TensorSpec{{Name: "a", Type: quant.F32, Shape: []int64{4}}, {Name: "b", Type: quant.F32, Shape: []int64{4}}}
	cases := []struct {
		name  string
		kvs   []KV
		specs []TensorSpec
		o     WriteOptions
		want  string
	}{
		{"duplicate key", []KV{{"k", U8(1)}, {"k", U8(2)}}, nil, WriteOptions{}, `key "k" given twice`},
		{"bad value", []KV{{"k", Value{Type: TypeUint32, V: "x"}}}, nil, WriteOptions{}, "holds a Go string"},
		{"nested array", []KV{{"k", Value{Type: TypeArray, Elem: TypeArray, V: []any{}}}}, nil, WriteOptions{}, "not supported"},
		{"duplicate tensor", nil, []TensorSpec{good[0], good[0]}, WriteOptions{}, `tensor "a" given twice`},
		{"unknown type", nil, []TensorSpec{{Name: "x", Type: 36, Shape: []int64{256}}}, WriteOptions{}, "unknown tensor type 36"},
		{"partial block", nil, []TensorSpec{{Name: "x", Type: quant.Q4_0, Shape: []int64{33}}}, WriteOptions{}, "block size"},
		{"zero dim", nil, []TensorSpec{{Name: "x", Type: quant.F32, Shape: []int64{4, 0}}}, WriteOptions{}, "must be positive"},
		{"five dims", nil, []TensorSpec{{Name: "x", Type: quant.F32, Shape: []int64{1, 1, 1, 1, 1}}}, WriteOptions{}, "5 dimensions"},
		{"long name", nil, []TensorSpec{{Name: string(make([]byte, 64)), Type: quant.F32, Shape: []int64{1}}}, WriteOptions{}, "1 to 63 bytes"},
		{"alignment", nil, good, WriteOptions{Alignment: 48}, "not a power of two"},
		{"alignment conflict", []KV{{"general.alignment", U32(64)}}, good, WriteOptions{Alignment: 128}, "WriteOptions.Alignment is 128"},
		{"alignment type", []KV{{"general.alignment", U64(64)}}, good, WriteOptions{}, "must be u32"},
		{"both split modes", nil, good, WriteOptions{Split: SplitOptions{MaxTensors: 1, MaxBytes: 1}}, "not both"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Create(filepath.Join(t.TempDir(), "x.gguf"), c.kvs, c.specs, c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Create error = %v, want %q", err, c.want)
			}
		})
	}
	t.Run("out of order", func(t *testing.T) {
		w, err := Create(filepath.Join(t.TempDir(), "x.gguf"), nil, good, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := w.WriteTensor("b", make([]byte, 16)); err == nil || !strings.Contains(err.Error(), `tensor "a" is next`) {
			t.Errorf("err = %v", err)
		}
		if err := w.WriteTensor("a", make([]byte, 15)); err == nil || !strings.Contains(err.Error(), "got 15 bytes, want 16") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("incomplete close removes files", func(t *testing.T) {
		dir := t.TempDir()
		w, err := Create(filepath.Join(dir, "x"), nil, good, WriteOptions{Split: SplitOptions{MaxTensors: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, 20)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err == nil || !strings.Contains(err.Error(), `tensor "b" was complete (12 bytes missing)`) {
			t.Errorf("Close = %v", err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("files left behind: %v", left)
		}
	})
}
