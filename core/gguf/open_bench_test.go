package gguf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// countingReader records every read made while opening a model.
type countingReader struct {
	r     io.ReaderAt
	path  string
	reads *readLog
}

type readLog struct {
	mu    sync.Mutex
	bytes int64
	calls int64
	// furthest byte read per file
	end map[string]int64
}

func (c countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.reads.mu.Lock()
	c.reads.bytes += int64(n)
	c.reads.calls++
	c.reads.end[c.path] = max(c.reads.end[c.path], off+int64(n))
	c.reads.mu.Unlock()
	return n, err
}

// countReads makes Open read headers through a countingReader until the
// test ends.
func countReads(tb testing.TB) *readLog {
	log := &readLog{end: map[string]int64{}}
	old := headerReader
	headerReader = func(f *os.File) io.ReaderAt { return countingReader{f, f.Name(), log} }
	tb.Cleanup(func() { headerReader = old })
	return log
}

// synthShards writes a split set of sparse files: real headers (shard 1
// with a tokenizer-sized vocabulary), tensor data never written. It returns
// the first shard's path and each shard's header size.
func synthShards(tb testing.TB, dir string, shards, perShard int, vocab int) (string, map[string]int64) {
	tb.Helper()
	tokens := make([]string, vocab)
	merges := make([]string, vocab)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("tok%06d", i)
		merges[i] = fmt.Sprintf("t%d o%d", i, i)
	}
	kvs := []KV{
		{"general.architecture", Str("kimi-k3")},
		{"kimi-k3.block_count", U32(93)},
		{"tokenizer.ggml.tokens", Strs(tokens)},
		{"tokenizer.ggml.merges", Strs(merges)},
	}
	var specs []TensorSpec
	for i := range shards * perShard {
		// 7168 x 64 x 8 Q2_K: 9.6 MB, so each shard is gigabytes (sparse).
		specs = append(specs, TensorSpec{Name: fmt.Sprintf("blk.%d.ffn_up_exps.weight", i), Type: quant.Q2_K, Shape: []int64{7168, 64, 8}})
	}
	sizes, err := checkSpecs(kvs, specs)
	if err != nil {
		tb.Fatal(err)
	}
	plan, err := planSplit(filepath.Join(dir, "synth"), kvs, specs, sizes, DefaultAlignment, SplitOptions{MaxTensors: perShard})
	if err != nil {
		tb.Fatal(err)
	}
	headers := map[string]int64{}
	for _, s := range plan {
		hdr, err := encodeHeader(s, DefaultAlignment)
		if err != nil {
			tb.Fatal(err)
		}
		var data int64
		for _, n := range s.sizes {
			data += alignUp(n, DefaultAlignment)
		}
		f, err := os.Create(s.path)
		if err != nil {
			tb.Fatal(err)
		}
		_, err = f.Write(hdr)
		if err == nil {
			err = f.Truncate(alignUp(int64(len(hdr)), DefaultAlignment) + data)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			tb.Fatal(err)
		}
		headers[s.path] = int64(len(hdr))
	}
	return plan[0].path, headers
}

// TestOpenReadsOnlyHeaders checks that opening a split set reads each
// header and at most a bounded read-ahead, never tensor data wholesale.
func TestOpenReadsOnlyHeaders(t *testing.T) {
	first, headers := synthShards(t, t.TempDir(), 16, 64, 20000)
	log := countReads(t)
	f, err := Open(first)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(f.Tensors()) != 16*64 {
		t.Fatalf("%d tensors", len(f.Tensors()))
	}
	var total int64
	for path, h := range headers {
		// The read window doubles from 4 KiB, so it never reads more than
		// about twice the header, plus the first window.
		if end := log.end[path]; end < h || end > 2*h+firstChunk {
			t.Errorf("%s: read up to byte %d, header is %d bytes", filepath.Base(path), end, h)
		}
		total += h
	}
	if log.bytes > 2*total+int64(len(headers))*firstChunk {
		t.Errorf("read %d bytes for %d bytes of headers", log.bytes, total)
	}
	t.Logf("%d shards: headers %d bytes, read %d bytes in %d calls", len(headers), total, log.bytes, log.calls)
}

// BenchmarkOpenManyShards opens a 64-shard set with 256 tensors per shard
// (16384 tensors, ~160 GB of sparse data) and a 163840-token vocabulary.
func BenchmarkOpenManyShards(b *testing.B) {
	first, headers := synthShards(b, b.TempDir(), 64, 256, 163840)
	var total int64
	for _, h := range headers {
		total += h
	}
	log := countReads(b)
	b.ResetTimer()
	for range b.N {
		f, err := Open(first)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(log.bytes)/float64(b.N), "bytes-read/op")
	b.ReportMetric(float64(total), "header-bytes")
	b.ReportMetric(float64(log.calls)/float64(b.N), "reads/op")
}
