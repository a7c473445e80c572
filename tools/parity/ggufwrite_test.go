package parity

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// A minimal GGUF v3 writer for the harness's own tests, written from the
// format description so that it does not depend on k3's reader under test.

type testTensor struct {
	name string
	typ  quant.Type
	ne   []int64
	data []byte
	off  int64 // filled in: offset relative to the data section
}

type ggufBuf struct{ bytes.Buffer }

func (b *ggufBuf) u32(v uint32) { binary.Write(b, binary.LittleEndian, v) }
func (b *ggufBuf) u64(v uint64) { binary.Write(b, binary.LittleEndian, v) }
func (b *ggufBuf) str(s string) { b.u64(uint64(len(s))); b.WriteString(s) }

// scalarType maps a Go value to its GGUF type.
func scalarType(v any) uint32 {
	switch v.(type) {
	case uint8:
		return TypeUint8
	case int8:
		return TypeInt8
	case uint16:
		return TypeUint16
	case int16:
		return TypeInt16
	case uint32:
		return TypeUint32
	case int32:
		return TypeInt32
	case float32:
		return TypeFloat32
	case bool:
		return TypeBool
	case string:
		return TypeString
	case uint64:
		return TypeUint64
	case int64:
		return TypeInt64
	case float64:
		return TypeFloat64
	}
	panic(fmt.Sprintf("no GGUF type for %T", v))
}

func (b *ggufBuf) scalar(v any) {
	switch v := v.(type) {
	case string:
		b.str(v)
	case bool:
		if v {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
	default:
		binary.Write(b, binary.LittleEndian, v)
	}
}

// kvOf builds a KV from a Go value; slices become arrays.
func kvOf(key string, v any) KV {
	switch s := v.(type) {
	case []string:
		return KV{key, TypeArray, TypeString, s}
	case []int32:
		return KV{key, TypeArray, TypeInt32, s}
	case []float32:
		return KV{key, TypeArray, TypeFloat32, s}
	case []uint8:
		return KV{key, TypeArray, TypeUint8, s}
	case []bool:
		return KV{key, TypeArray, TypeBool, s}
	case []uint64:
		return KV{key, TypeArray, TypeUint64, s}
	case []float64:
		return KV{key, TypeArray, TypeFloat64, s}
	case []int16:
		return KV{key, TypeArray, TypeInt16, s}
	}
	return KV{key, scalarType(v), 0, v}
}

func (b *ggufBuf) value(kv KV) {
	b.u32(kv.Type)
	if kv.Type != TypeArray {
		b.scalar(kv.V)
		return
	}
	b.u32(kv.Elem)
	switch s := kv.V.(type) {
	case []string:
		b.u64(uint64(len(s)))
		for _, x := range s {
			b.str(x)
		}
	case []bool:
		b.u64(uint64(len(s)))
		for _, x := range s {
			b.scalar(x)
		}
	default:
		n := binary.Size(s) / map[uint32]int{TypeUint8: 1, TypeInt16: 2, TypeInt32: 4, TypeFloat32: 4, TypeUint64: 8, TypeFloat64: 8}[kv.Elem]
		b.u64(uint64(n))
		binary.Write(b, binary.LittleEndian, s)
	}
}

// writeGGUF writes kvs and tensors (alignment 32) and returns the tensors with
// their data-section offsets filled in.
func writeGGUF(t testing.TB, path string, kvs []KV, tensors []testTensor) []testTensor {
	t.Helper()
	const align = 32
	var b ggufBuf
	b.WriteString("GGUF")
	b.u32(3)
	b.u64(uint64(len(tensors)))
	b.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		b.str(kv.Key)
		b.value(kv)
	}
	var off int64
	for i := range tensors {
		tt := &tensors[i]
		b.str(tt.name)
		b.u32(uint32(len(tt.ne)))
		for _, d := range tt.ne {
			b.u64(uint64(d))
		}
		b.u32(uint32(tt.typ))
		tt.off = off
		b.u64(uint64(off))
		off += (int64(len(tt.data)) + align - 1) / align * align
	}
	pad := func() {
		for b.Len()%align != 0 {
			b.WriteByte(0)
		}
	}
	pad()
	for _, tt := range tensors {
		b.Write(tt.data)
		pad()
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return tensors
}

func f32Tensor(name string, data []float32, ne ...int64) testTensor {
	b := make([]byte, 4*len(data))
	for i, f := range data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return testTensor{name: name, typ: quant.F32, ne: ne, data: b}
}
