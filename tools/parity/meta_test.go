package parity

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/quant"
)

func TestMeta(t *testing.T) {
	r := Require(t)
	kvs := []KV{
		kvOf("general.architecture", "llama"),
		kvOf("u8", uint8(200)),
		kvOf("i8", int8(-100)),
		kvOf("u16", uint16(65000)),
		kvOf("i16", int16(-32000)),
		kvOf("u32", uint32(4_000_000_000)),
		kvOf("i32", int32(-2_000_000_000)),
		kvOf("f32", float32(0.1)),
		kvOf("f32.inf", float32(math.Inf(-1))),
		kvOf("bool", true),
		kvOf("str", "quote \" backslash \\ newline \n tab \t ünïcödé ▁"),
		kvOf("str.bad-utf8", "\xff\xfe<0x80>\xc3"),
		kvOf("u64", uint64(math.MaxUint64)),
		kvOf("i64", int64(math.MinInt64)),
		kvOf("f64", 1.0/3),
		kvOf("arr.str", []string{"a", "", "x", "\xc3\x28", "▁hello"}),
		kvOf("arr.i32", []int32{-1, 0, math.MaxInt32}),
		kvOf("arr.f32", []float32{1.5, -0.25, float32(math.Inf(1))}),
		kvOf("arr.u8", []uint8{0, 255}),
		kvOf("arr.bool", []bool{true, false}),
		kvOf("arr.u64", []uint64{1 << 63}),
		kvOf("arr.f64", []float64{math.Pi}),
		kvOf("arr.i16", []int16{}),
	}
	q8 := make([]byte, 4*34)
	path := filepath.Join(t.TempDir(), "meta.gguf")
	tensors := writeGGUF(t, path, kvs, []testTensor{
		f32Tensor("a", make([]float32, 5), 5),
		{name: "b.q8_0", typ: quant.Q8_0, ne: []int64{64, 2}, data: q8},
		{name: "c.f16", typ: quant.F16, ne: []int64{4, 1, 3}, data: make([]byte, 2*12)},
		f32Tensor("d.column", make([]float32, 4), 4, 1),
	})

	m, err := r.Meta(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 3 || m.Alignment != 32 {
		t.Errorf("version %d alignment %d, want 3 and 32", m.Version, m.Alignment)
	}
	if d := cmp.Diff(kvs, m.KVs); d != "" {
		t.Errorf("KVs (-want +got):\n%s", d)
	}
	var want []TensorInfo
	for _, tt := range tensors {
		ti := TensorInfo{Name: tt.name, Type: tt.typ, Ne: [4]int64{1, 1, 1, 1}, Offset: m.DataOffset + tt.off, Size: int64(len(tt.data))}
		copy(ti.Ne[:], tt.ne)
		ti.Shape = tt.ne
		if tt.name == "d.column" {
			ti.Shape = []int64{4} // gguf_* keeps ne, not n_dims
		}
		want = append(want, ti)
	}
	if d := cmp.Diff(want, m.Tensors); d != "" {
		t.Errorf("tensors (-want +got):\n%s", d)
	}
	if kv, ok := m.Lookup("str.bad-utf8"); !ok || kv.V != "\xff\xfe<0x80>\xc3" {
		t.Errorf("Lookup(str.bad-utf8) = %+v, %v", kv, ok)
	}
	if ti, ok := m.Tensor("b.q8_0"); !ok || ti.Size != 4*34 {
		t.Errorf("Tensor(b.q8_0) = %+v, %v", ti, ok)
	}
}
