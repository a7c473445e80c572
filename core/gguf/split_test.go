package gguf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/quant"
)

func splitSpecs(n int) []TensorSpec {
	specs := make([]TensorSpec, n)
	for i := range specs {
		specs[i] = TensorSpec{Name: "blk." + strings.Repeat("x", i%3) + string(rune('a'+i)), Type: quant.F32, Shape: []int64{int64(8 + i)}}
	}
	return specs
}

var splitKVs = []KV{{"general.architecture", Str("llama")}, {"general.uuid", Str("a")}, {"llama.block_count", U32(2)}}

func TestSplitLayout(t *testing.T) {
	specs := splitSpecs(7)
	data := randomData(t, specs, 3)
	cases := []struct {
		name   string
		o      SplitOptions
		counts []int // tensors per shard
	}{
		{"max tensors 3", SplitOptions{MaxTensors: 3}, []int{3, 3, 1}},
		{"max tensors 7", SplitOptions{MaxTensors: 7}, []int{7}},
		// Padded sizes are 32, 64, 64, 64, 64, 64, 64 bytes (8..14 f32).
		{"max bytes 128", SplitOptions{MaxBytes: 128}, []int{2, 2, 2, 1}},
		{"max bytes 1", SplitOptions{MaxBytes: 1}, []int{1, 1, 1, 1, 1, 1, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			paths := writeModel(t, filepath.Join(dir, "m.gguf"), splitKVs, specs, data, WriteOptions{Split: c.o})
			if len(paths) != len(c.counts) {
				t.Fatalf("%d shards, want %d", len(paths), len(c.counts))
			}
			for i, p := range paths {
				want := filepath.Join(dir, SplitPath("m", i, len(c.counts)))
				if p != want {
					t.Errorf("shard %d path %s, want %s", i, p, want)
				}
				checkShardHeader(t, p, i, len(c.counts), c.counts[i], len(specs))
			}
			f, err := Open(paths[0])
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if diff := cmp.Diff(paths, f.Paths()); diff != "" {
				t.Errorf("Paths (-want +got):\n%s", diff)
			}
			checkTensors(t, f, specs, data)
			first := 0
			for shard, n := range c.counts {
				for _, ti := range f.Tensors()[first : first+n] {
					if ti.Shard != shard {
						t.Errorf("tensor %q in shard %d, want %d", ti.Name, ti.Shard, shard)
					}
				}
				first += n
			}
			if got := f.Uint("block_count", 0); got != 2 {
				t.Errorf("block_count from shard 1 = %d", got)
			}
		})
	}
}

// checkShardHeader checks the KVs gguf-split puts on shard i: everything on
// shard 1, then split.no (u16), split.count (u16), split.tensors.count (i32);
// k3 also puts shard 1's identity keys on the others.
func checkShardHeader(t *testing.T, path string, i, n, tensors, total int) {
	t.Helper()
	fd, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	st, _ := fd.Stat()
	h, err := readHeader(fd, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	var want []KV
	for _, kv := range splitKVs {
		if i == 0 || kv.Key == "general.architecture" || kv.Key == "general.uuid" { // later shards: the identity keys
			want = append(want, kv)
		}
	}
	want = append(want, KV{KeySplitNo, U16(uint16(i))}, KV{KeySplitCount, U16(uint16(n))}, KV{KeySplitTensorsCount, I32(int32(total))})
	if diff := cmp.Diff(want, h.kvs); diff != "" {
		t.Errorf("shard %d KVs (-want +got):\n%s", i, diff)
	}
	if len(h.tensors) != tensors {
		t.Errorf("shard %d has %d tensors, want %d", i, len(h.tensors), tensors)
	}
}

// writeShard writes one file with the given split keys, to build broken sets.
func writeShard(t *testing.T, path string, no, count, total int, specs []TensorSpec) {
	writeShardKVs(t, path, no, specs, KV{KeySplitNo, U16(uint16(no))}, KV{KeySplitCount, U16(uint16(count))}, KV{KeySplitTensorsCount, I32(int32(total))})
}

// writeShardKVs writes shard no (0-based) with exactly the KVs given (shard
// 1 gets the model's metadata first), as llama-gguf-split would.
func writeShardKVs(t *testing.T, path string, no int, specs []TensorSpec, kvs ...KV) {
	if no == 0 {
		kvs = append(append([]KV(nil), splitKVs...), kvs...)
	}
	writeModel(t, path, kvs, specs, randomData(t, specs, 4), WriteOptions{})
}

// splitKeys are the split keys of shard no of a 3-shard, 6-tensor set.
func splitKeys(no int) []KV {
	return []KV{{KeySplitNo, U16(uint16(no))}, {KeySplitCount, U16(3)}, {KeySplitTensorsCount, I32(6)}}
}

// TestSplitWithoutIdentityKeys: a set as llama-gguf-split writes it, with
// nothing but the split keys on shards 2..n, still loads.
func TestSplitWithoutIdentityKeys(t *testing.T) {
	specs := splitSpecs(6)
	dir := t.TempDir()
	for i := range 3 {
		writeShard(t, filepath.Join(dir, SplitPath("m", i, 3)), i, 3, 6, specs[2*i:2*i+2])
	}
	f, err := Open(filepath.Join(dir, SplitPath("m", 0, 3)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(f.Tensors()) != 6 {
		t.Errorf("%d tensors", len(f.Tensors()))
	}
}

func TestSplitErrors(t *testing.T) {
	specs := splitSpecs(6)
	cases := []struct {
		name   string
		open   string // file to open, relative to the set's dir
		break_ func(t *testing.T, dir string)
		want   string
	}{
		{"non-first shard", "m-00002-of-00003.gguf", nil,
			"this is shard 2 of 3; a split model is opened through its first shard ("},
		{"missing shard", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "m-00003-of-00003.gguf"))
		}, "shard 3 of 3 is missing"},
		{"extra shard", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(dir, "m-00003-of-00003.gguf"), filepath.Join(dir, "m-00004-of-00003.gguf"))
		}, "found m-00004-of-00003.gguf next to the 3-shard set"},
		{"leftover set", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(dir, "m-00003-of-00003.gguf"), filepath.Join(dir, "m-00004-of-00004.gguf"))
		}, "found m-00004-of-00004.gguf"},
		{"count mismatch", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			writeShard(t, filepath.Join(dir, "m-00002-of-00003.gguf"), 1, 4, 6, specs[2:4])
		}, `m-00002-of-00003.gguf: key "split.count" is 4, shard 1 says 3`},
		{"split.count missing", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			writeShardKVs(t, filepath.Join(dir, "m-00002-of-00003.gguf"), 1, specs[2:4], KV{KeySplitNo, U16(1)}, KV{KeySplitTensorsCount, I32(6)})
		}, `m-00002-of-00003.gguf: key "split.count" is missing`},
		{"split.tensors.count missing", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			writeShardKVs(t, filepath.Join(dir, "m-00003-of-00003.gguf"), 2, specs[4:6], KV{KeySplitNo, U16(2)}, KV{KeySplitCount, U16(3)})
		}, `m-00003-of-00003.gguf: key "split.tensors.count" is missing`},
		{"split.tensors.count differs", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			writeShardKVs(t, filepath.Join(dir, "m-00003-of-00003.gguf"), 2, specs[4:6], KV{KeySplitNo, U16(2)}, KV{KeySplitCount, U16(3)}, KV{KeySplitTensorsCount, I32(7)})
		}, `m-00003-of-00003.gguf: key "split.tensors.count" is 7, shard 1 says 6`},
		{"another architecture", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			writeShardKVs(t, filepath.Join(dir, "m-00002-of-00003.gguf"), 1, specs[2:4], append([]KV{{"general.architecture", Str("qwen3moe")}}, splitKeys(1)...)...)
		}, `m-00002-of-00003.gguf: key "general.architecture" is "qwen3moe", shard 1 says "llama": this shard belongs to another model`},
		{"another model's uuid", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			writeShardKVs(t, filepath.Join(dir, "m-00003-of-00003.gguf"), 2, specs[4:6], append([]KV{{"general.architecture", Str("llama")}, {"general.uuid", Str("b")}}, splitKeys(2)...)...)
		}, `m-00003-of-00003.gguf: key "general.uuid" is "b", shard 1 says "a"`},
		{"wrong split.no", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			writeShard(t, filepath.Join(dir, "m-00002-of-00003.gguf"), 2, 3, 6, specs[2:4])
		}, `key "split.no" says shard 3, the name says shard 2`},
		{"tensors count mismatch", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			writeShard(t, filepath.Join(dir, "m-00002-of-00003.gguf"), 1, 3, 6, specs[2:3])
		}, `the 3 shards hold 5 tensors, key "split.tensors.count" says 6`},
		{"duplicate across shards", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			writeShard(t, filepath.Join(dir, "m-00002-of-00003.gguf"), 1, 3, 6, []TensorSpec{specs[0], specs[3]})
		}, `tensor "` + specs[0].Name + `" is also in shard 1`},
		{"renamed first shard", "renamed.gguf", func(t *testing.T, dir string) {
			os.Rename(filepath.Join(dir, "m-00001-of-00003.gguf"), filepath.Join(dir, "renamed.gguf"))
		}, "shard 1 of a 3-shard model must be named PREFIX-00001-of-00003.gguf"},
		{"corrupt shard", "m-00001-of-00003.gguf", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "m-00003-of-00003.gguf"), []byte("GGUF\x01\x00\x00\x00"), 0o644)
		}, "m-00003-of-00003.gguf: GGUF version 1 is not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeModel(t, filepath.Join(dir, "m"), splitKVs, specs, randomData(t, specs, 4), WriteOptions{Split: SplitOptions{MaxTensors: 2}})
			if c.break_ != nil {
				c.break_(t, dir)
			}
			f, err := Open(filepath.Join(dir, c.open))
			if err == nil {
				f.Close()
				t.Fatalf("opened, want error %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want %q", err, c.want)
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSplitPrefix(t *testing.T) {
	p, i, n, ok := SplitPrefix("/models/k3/Kimi-K3-Q2_K-00007-of-00094.gguf")
	if !ok || p != "/models/k3/Kimi-K3-Q2_K" || i != 6 || n != 94 {
		t.Errorf("SplitPrefix = %q %d %d %v", p, i, n, ok)
	}
	if SplitPath(p, i, n) != "/models/k3/Kimi-K3-Q2_K-00007-of-00094.gguf" {
		t.Errorf("SplitPath does not invert SplitPrefix")
	}
	if _, _, _, ok := SplitPrefix("model.gguf"); ok {
		t.Errorf("SplitPrefix accepted a plain name")
	}
}

// TestShardPath: shards moved away from the first (onto other drives) are
// found through OpenOptions.ShardPath, in its order, and the File reads
// their tensors from where they are; without it they are missing.
func TestShardPath(t *testing.T) {
	specs := splitSpecs(7)
	data := randomData(t, specs, 3)
	dir, a, b := t.TempDir(), t.TempDir(), t.TempDir()
	paths := writeModel(t, filepath.Join(dir, "m.gguf"), splitKVs, specs, data, WriteOptions{Split: SplitOptions{MaxTensors: 3}})
	moved := []string{paths[0], filepath.Join(b, filepath.Base(paths[1])), filepath.Join(a, filepath.Base(paths[2]))}
	for i := 1; i < 3; i++ {
		if err := os.Rename(paths[i], moved[i]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(paths[0]); err == nil || !strings.Contains(err.Error(), "shard 2 of 3 is missing") {
		t.Fatalf("shards moved away, no shard path: %v", err)
	}
	f, err := OpenWith(paths[0], OpenOptions{ShardPath: []string{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if diff := cmp.Diff(moved, f.Paths()); diff != "" {
		t.Errorf("Paths (-want +got):\n%s", diff)
	}
	checkTensors(t, f, specs, data)
	// A copy next to the first wins over the shard path.
	if err := os.Link(moved[2], paths[2]); err != nil {
		t.Fatal(err)
	}
	g, err := OpenWith(paths[0], OpenOptions{ShardPath: []string{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := g.Paths()[2]; got != paths[2] {
		t.Errorf("shard 3 from %s, want the one next to shard 1 (%s)", got, paths[2])
	}
	if _, err := OpenWith(paths[0], OpenOptions{ShardPath: []string{a}}); err == nil || !strings.Contains(err.Error(), "shard 2 of 3 is missing (nor in "+a+")") {
		t.Errorf("shard 2 in no listed directory: %v", err)
	}
}
