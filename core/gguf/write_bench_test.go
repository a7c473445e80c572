package gguf

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// BenchmarkWrite streams 308 MB of Q2_K tensors through the Writer in
// 1 MiB caller buffers, split into shards of at most 64 MiB. Set
// K3_BENCH_DIR to write somewhere other than the test's temp dir (for
// example /dev/shm to leave the disk out).
func BenchmarkWrite(b *testing.B) {
	dir := os.Getenv("K3_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	var specs []TensorSpec
	var total int64
	for i := range 64 {
		s := TensorSpec{Name: fmt.Sprintf("blk.%d.ffn_up_exps.weight", i), Type: quant.Q2_K, Shape: []int64{7168, 256, 8}}
		n, err := tensorBytes(s.Type, s.Shape)
		if err != nil {
			b.Fatal(err)
		}
		specs = append(specs, s)
		total += n
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	b.SetBytes(total)
	b.ResetTimer()
	for range b.N {
		w, err := Create(filepath.Join(dir, "bench"), splitKVs, specs, WriteOptions{Split: SplitOptions{MaxBytes: 64 << 20}})
		if err != nil {
			b.Fatal(err)
		}
		for left := total; left > 0; {
			n, err := w.Write(buf[:min(int64(len(buf)), left)])
			if err != nil {
				b.Fatal(err)
			}
			left -= int64(n)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		for _, p := range w.Paths() {
			os.Remove(p)
		}
		b.StartTimer()
	}
}
