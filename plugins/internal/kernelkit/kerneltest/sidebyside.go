package kerneltest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// BenchSideBySide is BenchmarkMatVec on the shape and thread count
// tools/sidebyside/run.sh asks for, so that it matches k3ref matvec
// (llama.cpp's kernels) on the same machine: K3_SBS_ROWS × K3_SBS_COLS
// weights (default 4096 × 4096; more rows than fit in L3 make it a memory
// bandwidth test), K3_SBS_THREADS threads (default GOMAXPROCS). It runs
// only with K3_SBS=1, as it repeats BenchmarkMatVec otherwise. The
// weights are 256 distinct rows tiled: the values do not change the time,
// and generating a matrix larger than L3 row by row would take longer than
// measuring it.
func BenchSideBySide(b *testing.B, k *kernelkit.Kit) {
	if os.Getenv("K3_SBS") != "1" {
		b.Skip("set K3_SBS=1 (tools/sidebyside/run.sh does)")
	}
	env := func(name string, def int) int {
		v, err := strconv.Atoi(os.Getenv(name))
		if err != nil || v <= 0 {
			return def
		}
		return v
	}
	rows, n, threads := env("K3_SBS_ROWS", 4096), env("K3_SBS_COLS", 4096), env("K3_SBS_THREADS", runtime.GOMAXPROCS(0))
	keepLevel(b, k)
	for _, typ := range kernelTypes {
		if n%typ.BlockSize() != 0 {
			continue
		}
		// The weights are made on the first sub-benchmark the -bench
		// pattern selects, not for types it filters out.
		var w, act []byte
		var out []float32
		setup := func() {
			if w != nil {
				return
			}
			r := rand.New(rand.NewPCG(9, uint64(typ)))
			part := min(rows, 256)
			block := randWeights(r, typ, part*n)
			w = make([]byte, 0, len(block)*((rows+part-1)/part))
			for len(w) < cap(w) {
				w = append(w, block...)
			}
			w = w[:len(block)/part*rows]
			act = randActs(r, typ, n)
			out = make([]float32, rows)
		}
		modes := []string{"exact"}
		if typ == quant.F32 || typ == quant.F16 || typ == quant.BF16 {
			modes = kernelkit.FloatModes
		}
		for _, mode := range modes {
			name := typ.String()
			if mode != "exact" {
				name += "-" + mode // float mode fast: f32-fast, f16-fast, bf16-fast
			}
			for _, lv := range k.Levels() {
				b.Run(fmt.Sprintf("%s/%s/t%d", name, lv, threads), func(b *testing.B) {
					if err := errors.Join(k.SetLevel(lv), k.SetFloatMode(mode)); err != nil {
						b.Fatal(err)
					}
					defer k.SetFloatMode("exact")
					setup()
					b.SetBytes(int64(len(w)))
					var times []time.Duration
					fb := kernelkit.FloatFallbacks()
					for b.Loop() {
						start := time.Now()
						if err := k.MatVec(typ, w, rows, n, act, out, threads); err != nil {
							b.Fatal(err)
						}
						times = append(times, time.Since(start))
					}
					// The median, next to the mean go test prints, is robust to
					// a shared machine's scheduling stalls; k3ref matvec reports both.
					slices.Sort(times)
					med := times[len(times)/2]
					b.ReportMetric(float64(med.Nanoseconds()), "median-ns/op")
					b.ReportMetric(float64(len(w))/float64(med.Nanoseconds()), "median-GB/s")
					// The best, as k3ref matvec's best_us: the uncontended time
					// on a loaded machine.
					b.ReportMetric(float64(times[0].Nanoseconds()), "best-ns/op")
					if fb := kernelkit.FloatFallbacks() - fb; fb > 0 {
						// The plain float rows the exactness bound could not decide.
						b.ReportMetric(float64(fb)/float64(len(times)*rows), "fallbacks/row")
					}
				})
			}
		}
	}
}
