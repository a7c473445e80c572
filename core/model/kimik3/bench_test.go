package kimik3_test

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/tools/parity"
)

// benchConfig is a mid-size model (~120 MB at Q4_K_M): big enough that
// matrix products dominate, small enough for a shared two-core machine.
func benchConfig() synth.Config {
	c, _ := synth.Preset("tiny")
	c.NEmbd, c.NLayer, c.NHead, c.NVocab = 1024, 8, 8, 32768
	c.KDAHead, c.QLoRA, c.KVLoRA, c.QKNope, c.QKRope, c.VHead = 128, 512, 512, 128, 64, 128
	c.NFF, c.NExpert, c.NExpertUsed, c.NFFExp, c.NLatent = 4096, 32, 4, 512, 512
	c.Type = synth.TypeQ4_K_M
	if s := os.Getenv("K3_BENCH_TYPE"); s != "" {
		c.Type, _ = synth.ParseOutType(s)
	}
	return c
}

func benchThreads() int {
	n, _ := strconv.Atoi(os.Getenv("K3_BENCH_THREADS"))
	if n <= 0 {
		n = 2
	}
	return n
}

// BenchmarkKimiK3 reports prefill and decode tokens/s of the reference
// path, and of llama.cpp (native CPU variant) on the same file and
// threads when the harness is built (K3_BENCH_CPU=generic for its scalar
// build, K3_BENCH_TYPE and K3_BENCH_THREADS for the file type and
// threads). llama.cpp's figures are wall-clock
// differences (a long run minus a one-token run), so they exclude loading.
func BenchmarkKimiK3(b *testing.B) {
	c := benchConfig()
	path := filepath.Join(b.TempDir(), "bench.gguf")
	if _, err := synth.Write(path, c, synth.WriteOptions{Workers: 2}); err != nil {
		b.Fatal(err)
	}
	th := benchThreads()
	m := load(b, path, th)
	const prefillN, decodeN = 64, 16
	toks := prompt(prefillN, c.NVocab)

	b.Run("k3/prefill", func(b *testing.B) {
		for b.Loop() {
			r := engine.NewRunner(m, engine.Batch, 0)
			if _, err := r.Prefill(toks, false); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(prefillN*b.N)/b.Elapsed().Seconds(), "tok/s")
	})
	b.Run("k3/decode", func(b *testing.B) {
		for b.Loop() {
			r := engine.NewRunner(m, engine.Batch, 0)
			last, err := r.Prefill(toks[:8], false)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := r.Greedy(last, decodeN+1); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(decodeN)/time.Since(start).Seconds(), "tok/s")
		}
	})

	ref, err := parity.Find()
	if err != nil {
		b.Logf("no llama.cpp harness: %v", err)
		return
	}
	cpu := os.Getenv("K3_BENCH_CPU") // llama.cpp CPU variant; "" = native
	o := parity.LogitsOptions{Threads: th, CPU: cpu}
	// the fastest of three runs, to shed the noise of a shared machine
	timed := func(f func() error) time.Duration {
		best := time.Duration(math.MaxInt64)
		for range 3 {
			start := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			best = min(best, time.Since(start))
		}
		return best
	}
	b.Run("llama.cpp/prefill", func(b *testing.B) {
		var d time.Duration
		for b.Loop() {
			long := timed(func() error { _, err := ref.Logits(path, toks, o); return err })
			short := timed(func() error { _, err := ref.Logits(path, toks[:1], o); return err })
			d += long - short
		}
		b.ReportMetric(float64((prefillN-1)*b.N)/d.Seconds(), "tok/s")
	})
	b.Run("llama.cpp/decode", func(b *testing.B) {
		var d time.Duration
		for b.Loop() {
			long := timed(func() error {
				_, err := ref.GreedyOpts(path, toks[:8], decodeN+1, parity.LogitsOptions{Threads: th, CPU: cpu, IgnoreEOG: true})
				return err
			})
			short := timed(func() error {
				_, err := ref.GreedyOpts(path, toks[:8], 1, parity.LogitsOptions{Threads: th, CPU: cpu, IgnoreEOG: true})
				return err
			})
			d += long - short
		}
		b.ReportMetric(float64(decodeN*b.N)/d.Seconds(), "tok/s")
	})
}
