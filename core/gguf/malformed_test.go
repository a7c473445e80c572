package gguf

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// raw builds GGUF bytes field by field, so tests can write what the Writer
// refuses to.
type raw struct{ b []byte }

func (r *raw) u32(v uint32) *raw   { r.b = binary.LittleEndian.AppendUint32(r.b, v); return r }
func (r *raw) u64(v uint64) *raw   { r.b = binary.LittleEndian.AppendUint64(r.b, v); return r }
func (r *raw) str(s string) *raw   { return r.u64(uint64(len(s))).bytes([]byte(s)) }
func (r *raw) bytes(p []byte) *raw { r.b = append(r.b, p...); return r }
func (r *raw) pad(align int) *raw  { return r.bytes(make([]byte, (align-len(r.b)%align)%align)) }
func (r *raw) zeros(n int) *raw    { return r.bytes(make([]byte, n)) }
func (r *raw) kvU32(k string, v uint32) *raw {
	return r.str(k).u32(uint32(TypeUint32)).u32(v)
}

// start writes magic, version and the two counts.
func start(version uint32, nTensors, nKV uint64) *raw {
	return (&raw{}).bytes([]byte("GGUF")).u32(version).u64(nTensors).u64(nKV)
}

// tensor appends one tensor info.
func (r *raw) tensor(name string, typ quant.Type, off uint64, dims ...uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(uint32(typ)).u64(off)
}

func malformedCases() []struct {
	name string
	data []byte
	want string
} {
	long := strings.Repeat("x", 64)
	return []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "not a GGUF file"},
		{"bad magic", []byte("GGML\x03\x00\x00\x00"), `magic is "GGML"`},
		{"version 1", start(1, 0, 0).b, "version 1 is not supported"},
		{"version 4", start(4, 0, 0).b, "version 4 is not supported"},
		{"big endian", (&raw{}).bytes([]byte("GGUF")).u32(0x03000000).b, "big-endian"},
		{"truncated counts", start(3, 0, 0).b[:12], "unexpected end of file at offset 8"},
		{"2^60 keys", start(3, 0, 1<<60).b, "claims 1152921504606846976 key-value pairs"},
		{"2^60 tensors", start(3, 1<<60, 0).b, "claims 1152921504606846976 tensors"},
		{"2^50-byte key", start(3, 0, 1).u64(1 << 50).zeros(16).b, "string of 1125899906842624 bytes"},
		{"2^50-byte string value", start(3, 0, 1).str("k").u32(uint32(TypeString)).u64(1 << 50).zeros(8).b, `key "k": string of 1125899906842624 bytes`},
		{"2^40-element array", start(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint32)).u64(1 << 40).zeros(8).b, `key "k": array of 1099511627776 u32 runs past`},
		{"2^40 strings", start(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(1 << 40).zeros(8).b, "array of 1099511627776 strings runs past"},
		{"nested array", start(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(0).zeros(8).b, "arrays of arrays are not supported"},
		{"unknown value type", start(3, 0, 1).str("k").u32(13).zeros(8).b, `key "k": unknown value type 13`},
		{"unknown array type", start(3, 0, 1).str("k").u32(uint32(TypeArray)).u32(99).u64(0).zeros(8).b, "array of unknown value type 99"},
		{"empty key", start(3, 0, 1).str("").u32(0).zeros(8).b, "key 0 is empty"},
		{"duplicate key", start(3, 0, 2).kvU32("k", 1).kvU32("k", 2).b, `key "k" appears twice`},
		{"truncated value", start(3, 0, 1).str("k").u32(uint32(TypeUint64)).zeros(4).b, `key "k": unexpected end of file`},
		{"alignment type", start(3, 0, 1).str("general.alignment").u32(uint32(TypeUint64)).u64(32).b, `"general.alignment" must be u32, is u64`},
		{"alignment not pow2", start(3, 0, 1).kvU32("general.alignment", 24).b, "24, not a power of two"},
		{"alignment zero", start(3, 0, 1).kvU32("general.alignment", 0).b, "0, not a power of two"},
		{"unknown tensor type", start(3, 1, 0).tensor("t", 36, 0, 256).pad(32).zeros(256).b, `tensor "t": unknown tensor type 36`},
		{"removed tensor type", start(3, 1, 0).tensor("t", 4, 0, 32).pad(32).zeros(64).b, `tensor "t": unknown tensor type 4`},
		{"five dims", start(3, 1, 0).tensor("t", quant.F32, 0, 1, 1, 1, 1, 1).b, `tensor "t": 5 dimensions`},
		{"zero dim", start(3, 1, 0).tensor("t", quant.F32, 0, 4, 0).pad(32).b, `tensor "t": dimension 1 is 0`},
		{"negative dim", start(3, 1, 0).tensor("t", quant.F32, 0, 1<<64-1).b, `tensor "t": dimension 0 is -1`},
		{"element overflow", start(3, 1, 0).tensor("t", quant.F32, 0, 1<<32, 1<<32).b, "element count overflows int64"},
		{"byte overflow", start(3, 1, 0).tensor("t", quant.F32, 0, 1<<31, 1<<31).b, "byte size overflows int64"},
		{"partial block", start(3, 1, 0).tensor("t", quant.Q4_0, 0, 33).b, "not a multiple of q4_0's block size 32"},
		{"long name", start(3, 1, 0).tensor(long, quant.F32, 0, 1).b, "name is 64 bytes"},
		{"empty name", start(3, 1, 0).tensor("", quant.F32, 0, 1).pad(32).zeros(32).b, "empty tensor name"},
		{"duplicate tensor", start(3, 2, 0).tensor("t", quant.F32, 0, 8).tensor("t", quant.F32, 32, 8).pad(32).zeros(64).b, `tensor "t" appears twice`},
		{"outside file", start(3, 1, 0).tensor("t", quant.F32, 0, 64).pad(32).zeros(100).b, `tensor "t": data [64, +256) lies outside the file (164 bytes)`},
		{"huge offset", start(3, 1, 0).tensor("t", quant.F32, 1<<63, 8).b, "data offset 9223372036854775808 is out of range"},
		{"misaligned", start(3, 2, 0).tensor("a", quant.F32, 0, 4).tensor("b", quant.F32, 16, 4).pad(32).zeros(64).b, `tensor "b": data offset 16 is not a multiple of general.alignment 32`},
		{"overlap", start(3, 2, 0).tensor("a", quant.F32, 0, 16).tensor("b", quant.F32, 32, 4).pad(32).zeros(128).b, `tensor "b": data at offset 32 overlaps tensor "a", which ends at 64`},
		{"gap", start(3, 2, 0).tensor("a", quant.F32, 0, 4).tensor("b", quant.F32, 64, 4).pad(32).zeros(128).b, `tensor "b": data offset 64 leaves a gap`},
		{"truncated tensor info", start(3, 1, 0).str("t").u32(2).u64(4).u64(4).u32(0).zeros(3).b, `tensor "t": unexpected end of file`},
	}
}

func TestMalformed(t *testing.T) {
	for _, c := range malformedCases() {
		t.Run(c.name, func(t *testing.T) {
			_, err := OpenReaderAt(bytes.NewReader(c.data), int64(len(c.data)), "bad.gguf")
			if err == nil {
				t.Fatalf("opened without error, want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "gguf: bad.gguf: ") {
				t.Fatalf("error %q, want it to name the file and contain %q", err, c.want)
			}
		})
	}
}

// TestMalformedIsValidOtherwise guards the table: the same builder produces
// files that open when the fields are sane, so the errors above come from
// the field each case breaks.
func TestMalformedIsValidOtherwise(t *testing.T) {
	data := start(3, 2, 1).kvU32("general.alignment", 32).
		tensor("a", quant.F32, 0, 4).tensor("b", quant.Q4_0, 32, 32, 2).pad(32).zeros(32 + 36).b
	f, err := OpenReaderAt(bytes.NewReader(data), int64(len(data)), "ok.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := f.Tensor("b"); b.Size != 36 || b.Offset != int64(len(data)-36) {
		t.Errorf("tensor b = %+v", b)
	}
}

// TestAbsurdHeadersAllocateLittle checks that claimed sizes are bounded by
// the file before anything is allocated.
func TestAbsurdHeadersAllocateLittle(t *testing.T) {
	for _, c := range malformedCases() {
		t.Run(c.name, func(t *testing.T) {
			r := bytes.NewReader(c.data)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range 10 {
				OpenReaderAt(r, int64(len(c.data)), "bad.gguf")
			}
			runtime.ReadMemStats(&after)
			perOpen := (after.TotalAlloc - before.TotalAlloc) / 10
			if limit := uint64(16<<10 + 8*len(c.data)); perOpen > limit {
				t.Errorf("allocated %d bytes per open of a %d-byte file, limit %d", perOpen, len(c.data), limit)
			}
		})
	}
}
