package gguf_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/tools/parity"
)

// parityKVs has every value type, arrays of each, empty arrays and strings
// that are not valid UTF-8.
func parityKVs() []gguf.KV {
	return []gguf.KV{
		{Key: "general.architecture", Value: gguf.Str("llama")},
		{Key: "p.u8", Value: gguf.U8(7)},
		{Key: "p.i8", Value: gguf.I8(-7)},
		{Key: "p.u16", Value: gguf.U16(65535)},
		{Key: "p.i16", Value: gguf.I16(-32768)},
		{Key: "p.u32", Value: gguf.U32(1 << 31)},
		{Key: "p.i32", Value: gguf.I32(-1 << 31)},
		{Key: "p.f32", Value: gguf.F32(0.1)},
		{Key: "p.bool", Value: gguf.Bool(true)},
		{Key: "p.str", Value: gguf.Str("tab\there \xff\xfe not utf-8")},
		{Key: "p.u64", Value: gguf.U64(1<<64 - 1)},
		{Key: "p.i64", Value: gguf.I64(-1 << 63)},
		{Key: "p.f64", Value: gguf.F64(-2.5e-300)},
		{Key: "p.a.u8", Value: gguf.U8s([]uint8{1, 2, 255})},
		{Key: "p.a.i8", Value: gguf.I8s([]int8{-1, 1})},
		{Key: "p.a.u16", Value: gguf.U16s([]uint16{9})},
		{Key: "p.a.i16", Value: gguf.I16s([]int16{-9, 9})},
		{Key: "p.a.u32", Value: gguf.U32s([]uint32{0, 1 << 31})},
		{Key: "p.a.i32", Value: gguf.I32s([]int32{0, 1, 0, 1})},
		{Key: "p.a.f32", Value: gguf.F32s([]float32{1.5, -0.25})},
		{Key: "p.a.bool", Value: gguf.Bools([]bool{false, true})},
		{Key: "p.a.str", Value: gguf.Strs([]string{"x", "", "\x01y"})}, // k3ref passes C strings: no NUL
		{Key: "p.a.u64", Value: gguf.U64s([]uint64{3})},
		{Key: "p.a.i64", Value: gguf.I64s([]int64{-3})},
		{Key: "p.a.f64", Value: gguf.F64s([]float64{1e300})},
		{Key: "p.a.empty", Value: gguf.I32s([]int32{})},
	}
}

// writeAllTypes writes one tensor of every known type (shapes of 1 to 4
// dimensions) and returns the path(s).
func writeAllTypes(t *testing.T, path string, o gguf.WriteOptions) []string {
	t.Helper()
	var specs []gguf.TensorSpec
	for typ := quant.Type(0); typ < 64; typ++ {
		if !typ.Known() {
			continue
		}
		shape := []int64{int64(typ.BlockSize()) * 2}
		shape = append(shape, []int64{3, 2, 2}[:int(typ)%4]...)
		specs = append(specs, gguf.TensorSpec{Name: "t." + typ.String(), Type: typ, Shape: shape})
	}
	w, err := gguf.Create(path, parityKVs(), specs, o)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range specs {
		_, left, _ := w.Current()
		buf := make([]byte, left)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		if err := w.WriteTensor(s.Name, buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.Paths()
}

// compareMeta checks that k3's reading of one file agrees with ggml's on
// every key, value and tensor.
func compareMeta(t *testing.T, r *parity.Ref, path string) {
	t.Helper()
	ref, err := r.Meta(path)
	if err != nil {
		t.Fatalf("ggml cannot read %s: %v", path, err)
	}
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	st, _ := fd.Stat()
	// OpenReaderAt reads the one file, whichever shard it is.
	f, err := gguf.OpenReaderAt(fd, st.Size(), path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version() != ref.Version || f.Alignment() != ref.Alignment {
		t.Errorf("%s: version %d alignment %d, ggml says %d %d", path, f.Version(), f.Alignment(), ref.Version, ref.Alignment)
	}
	var got []parity.KV
	for _, kv := range f.KVs() {
		got = append(got, parity.KV{Key: kv.Key, Type: uint32(kv.Value.Type), Elem: uint32(kv.Value.Elem), V: kv.Value.V})
	}
	if diff := cmp.Diff(ref.KVs, got); diff != "" {
		t.Errorf("%s: KVs (-ggml +k3):\n%s", path, diff)
	}
	var gotT, wantT []parity.TensorInfo
	for _, ti := range f.Tensors() {
		ne := [4]int64{1, 1, 1, 1}
		copy(ne[:], ti.Shape)
		gotT = append(gotT, parity.TensorInfo{Name: ti.Name, Type: ti.Type, Ne: ne, Offset: ti.Offset, Size: ti.Size})
	}
	for _, ti := range ref.Tensors {
		ti.Shape = nil // ggml drops trailing 1s; Ne carries the shape
		wantT = append(wantT, ti)
	}
	if diff := cmp.Diff(wantT, gotT); diff != "" {
		t.Errorf("%s: tensors (-ggml +k3):\n%s", path, diff)
	}
}

func TestParityMeta(t *testing.T) {
	r := parity.Require(t)
	cases := []struct {
		name string
		o    gguf.WriteOptions
	}{
		{"single", gguf.WriteOptions{}},
		{"align 64", gguf.WriteOptions{Alignment: 64}},
		{"split by tensors", gguf.WriteOptions{Split: gguf.SplitOptions{MaxTensors: 5}}},
		{"split by bytes", gguf.WriteOptions{Split: gguf.SplitOptions{MaxBytes: 1000}}},
		{"split, align 128", gguf.WriteOptions{Alignment: 128, Split: gguf.SplitOptions{MaxTensors: 7}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			paths := writeAllTypes(t, filepath.Join(t.TempDir(), "all.gguf"), c.o)
			for _, p := range paths {
				compareMeta(t, r, p)
			}
			// The merged view has each shard's tensors at ggml's offsets.
			f, err := gguf.Open(paths[0])
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			n := 0
			for i, p := range paths {
				ref, err := r.Meta(p)
				if err != nil {
					t.Fatal(err)
				}
				for _, rt := range ref.Tensors {
					ti, ok := f.Tensor(rt.Name)
					if !ok || ti.Shard != i || ti.Offset != rt.Offset || ti.Size != rt.Size {
						t.Errorf("tensor %q: k3 %+v, ggml shard %d %+v", rt.Name, ti, i, rt)
					}
					n++
				}
			}
			if n != len(f.Tensors()) {
				t.Errorf("ggml sees %d tensors, k3 %d", n, len(f.Tensors()))
			}
		})
	}
}

// TestParityLoadSplit checks that llama.cpp loads a split set written by
// the Writer for a real architecture, and agrees with k3 on the shards.
func TestParityLoadSplit(t *testing.T) {
	r := parity.Require(t)
	cfg, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, split := range []gguf.SplitOptions{{MaxTensors: 30}, {MaxBytes: 3_000_000}} {
		res, err := synth.Write(filepath.Join(t.TempDir(), "tiny"), cfg, synth.WriteOptions{Split: split})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Paths) < 2 {
			t.Fatalf("%+v gave %d shard(s)", split, len(res.Paths))
		}
		li, err := r.Load(res.Paths[0])
		if err != nil {
			t.Fatalf("llama.cpp refuses the split set: %v", err)
		}
		f, err := gguf.Open(res.Paths[0])
		if err != nil {
			t.Fatal(err)
		}
		if li.Arch != f.Arch() || uint64(li.NLayer) != f.Uint("block_count", 0) || uint64(li.NEmbd) != f.Uint("embedding_length", 0) {
			t.Errorf("llama.cpp loaded %+v; k3 reads arch %q, %d layers, width %d", li, f.Arch(), f.Uint("block_count", 0), f.Uint("embedding_length", 0))
		}
		var bytes int64
		for _, ti := range f.Tensors() {
			bytes += ti.Size
		}
		if uint64(bytes) != li.Size {
			t.Errorf("k3 counts %d tensor bytes, llama.cpp %d", bytes, li.Size)
		}
		f.Close()
		for _, p := range res.Paths {
			compareMeta(t, r, p)
		}
	}
}
