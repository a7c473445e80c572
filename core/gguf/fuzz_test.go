package gguf

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/k3-inference/k3/core/quant"
)

// fuzzSeeds returns small valid files made by the Writer (one plain, one
// with every value type, one split shard), plus truncations and the
// malformed table.
func fuzzSeeds(tb testing.TB) [][]byte {
	dir := tb.TempDir()
	var seeds [][]byte
	read := func(paths []string) {
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				tb.Fatal(err)
			}
			seeds = append(seeds, b)
		}
	}
	specs := []TensorSpec{
		{Name: "a", Type: quant.F32, Shape: []int64{3, 2}},
		{Name: "b", Type: quant.Q4_0, Shape: []int64{32}},
		{Name: "c", Type: quant.Q2_K, Shape: []int64{256, 1, 1, 1}},
	}
	data := randomData(tb, specs, 9)
	read(writeModel(tb, filepath.Join(dir, "plain.gguf"), splitKVs, specs, data, WriteOptions{}))
	read(writeModel(tb, filepath.Join(dir, "values.gguf"), allValueKVs(), specs[:1], data[:1], WriteOptions{Alignment: 64}))
	read(writeModel(tb, filepath.Join(dir, "split"), splitKVs, specs, data, WriteOptions{Split: SplitOptions{MaxTensors: 2}}))
	n := len(seeds)
	for _, s := range seeds[:n] {
		seeds = append(seeds, s[:len(s)/2], s[:len(s)-1])
	}
	for _, c := range malformedCases() {
		seeds = append(seeds, c.data)
	}
	return seeds
}

func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		file, err := OpenReaderAt(bytes.NewReader(data), int64(len(data)), "fuzz.gguf")
		runtime.ReadMemStats(&after)
		// Generous: decoded arrays and string headers cost a small multiple
		// of their encoding; what must never happen is an allocation sized
		// by a count the file merely claims.
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(1<<20+32*len(data)); got > limit {
			t.Fatalf("opening %d bytes allocated %d bytes (limit %d)", len(data), got, limit)
		}
		if err != nil {
			return
		}
		exercise(t, file, int64(len(data)))
	})
}

// exercise uses every read path of an opened file; none may panic, and
// every tensor must lie inside the input.
func exercise(t *testing.T, f *File, size int64) {
	for _, kv := range f.KVs() {
		_ = kv.Value.String()
		f.Uint(kv.Key, 0)
		f.Int(kv.Key, 0)
		f.Float(kv.Key, 0)
		f.Bool(kv.Key, false)
		f.String(kv.Key, "")
		f.Strings(kv.Key)
		f.Ints(kv.Key)
		f.Floats(kv.Key)
	}
	end := int64(0)
	for _, ti := range f.Tensors() {
		if ti.Offset < end || ti.Offset+ti.Size > size || ti.Size <= 0 {
			t.Fatalf("tensor %q at [%d, +%d) in a %d-byte file, previous ended at %d", ti.Name, ti.Offset, ti.Size, size, end)
		}
		end = ti.Offset + ti.Size
		r, err := f.TensorReader(ti)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, r); err != nil || n != ti.Size {
			t.Fatalf("tensor %q: read %d of %d bytes: %v", ti.Name, n, ti.Size, err)
		}
	}
	// What was read must encode to a header that reads back the same.
	specs := make([]TensorSpec, len(f.Tensors()))
	for i, ti := range f.Tensors() {
		if len(ti.Shape) == 0 {
			return // readable, as in ggml, but the writer wants 1 to 4 dimensions
		}
		specs[i] = TensorSpec{ti.Name, ti.Type, ti.Shape}
	}
	sizes, err := checkSpecs(f.KVs(), specs)
	if err != nil {
		t.Fatalf("a file that opens has specs the writer rejects: %v", err)
	}
	hdr, err := encodeHeader(shardPlan{kvs: f.KVs(), tensors: specs, sizes: sizes}, f.Alignment())
	if err != nil {
		t.Fatal(err)
	}
	total := alignUp(int64(len(hdr)), f.Alignment())
	for _, s := range sizes {
		total += alignUp(s, f.Alignment())
	}
	h, err := readHeader(zeroTail{hdr}, total)
	if err != nil {
		t.Fatalf("re-encoded header does not read: %v", err)
	}
	if diff := cmp.Diff(f.KVs(), h.kvs, cmpopts.EquateNaNs()); diff != "" {
		t.Fatalf("KVs change through re-encoding (-read +reread):\n%s", diff)
	}
	for i, ti := range h.tensors {
		if u := f.Tensors()[i]; ti.Name != u.Name || ti.Type != u.Type || ti.Size != u.Size || !cmp.Equal(ti.Shape, u.Shape) {
			t.Fatalf("tensor %d changes through re-encoding: %+v vs %+v", i, u, ti)
		}
	}
}

// zeroTail reads as its bytes followed by zeros, standing in for tensor
// data that is not there.
type zeroTail struct{ b []byte }

func (z zeroTail) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	if off < int64(len(z.b)) {
		copy(p, z.b[off:])
	}
	return len(p), nil
}
