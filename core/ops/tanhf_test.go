package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// checkRange compares ref's scalar and slice versions with the frozen
// oracle on the float bit patterns [lo, hi) stepping by step, returning
// the first mismatch.
func checkRange(fn, oracle func(float32) float32, slice func(dst, src []float32), lo, hi, step uint64) (uint32, bool) {
	var src, dst [1024]float32
	for b := lo; b < hi; {
		n := 0
		for ; n < len(src) && b < hi; b += step {
			src[n] = math.Float32frombits(uint32(b))
			n++
		}
		slice(dst[:n], src[:n])
		for i, x := range src[:n] {
			want := math.Float32bits(oracle(x))
			if math.Float32bits(fn(x)) != want || math.Float32bits(dst[i]) != want {
				return math.Float32bits(x), false
			}
		}
	}
	return 0, true
}

// checkAll checks all 2^32 arguments (one in 4099 with -short) in parallel
// and the neighbourhoods of edges in full.
func checkAll(t *testing.T, name string, fn, oracle func(float32) float32, slice func(dst, src []float32), edges []uint32) {
	step := uint64(1)
	if testing.Short() {
		step = 4099
	}
	const parts = 256
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var mu sync.Mutex
	var bad []uint32
	for p := range uint64(parts) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			lo := p << 32 / parts
			lo += (step - lo%step) % step
			if b, ok := checkRange(fn, oracle, slice, lo, (p+1)<<32/parts, step); !ok {
				mu.Lock()
				bad = append(bad, b)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, c := range edges {
		for _, s := range []uint32{0, 0x80000000} {
			if b, ok := checkRange(fn, oracle, slice, uint64(c-1<<16|s), uint64(c+1<<16|s), 1); !ok {
				bad = append(bad, b)
			}
		}
	}
	for _, b := range bad {
		x := math.Float32frombits(b)
		t.Errorf("%s(%g [%#08x]) mismatch: oracle %#08x, scalar %#08x", name, x, b, math.Float32bits(oracle(x)), math.Float32bits(fn(x)))
	}
}

// TestTanhfExhaustive: Tanhf and tanhfSlice (its vector lanes and their
// fallback) must be glibc's tanhf bit for bit, NaN payloads included.
func TestTanhfExhaustive(t *testing.T) {
	checkAll(t, "Tanhf", Tanhf, tanhfFrozen, tanhfSlice,
		[]uint32{0x24000000, 0x32800000, 0x33000000, 0x3e317218, 0x3eb17218, 0x3F051592, 0x3f800000, 0x41b00000})
}

// TestSigmoidExhaustive: sigmoidSlice must be Sigmoid bit for bit.
func TestSigmoidExhaustive(t *testing.T) {
	checkAll(t, "Sigmoid", Sigmoid, Sigmoid, sigmoidSlice, []uint32{0x42b00000, 0x42b17218, 0x42cff1b4})
}

func TestSiTUFrozen(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	for _, lb := range []float32{0, 7} {
		for _, sc := range []float64{0.5, 3, 20} {
			g, u := randVec(r, 5000), randVec(r, 5000)
			for i := range g {
				g[i] *= float32(math.Exp(r.NormFloat64() * sc))
				u[i] *= float32(math.Exp(r.NormFloat64() * sc))
			}
			g2 := append([]float32(nil), g...)
			SiTU(g, u, 4, lb)
			situRef(g2, u, 4, lb)
			sameBits(t, "situ", g, g2)
		}
	}
}

func BenchmarkTanhf(b *testing.B) {
	for _, sc := range []float32{0.25, 2} {
		r := rand.New(rand.NewPCG(41, 42))
		x := randVec(r, 4096)
		for i := range x {
			x[i] *= sc
		}
		var s float32
		for _, f := range []struct {
			name string
			fn   func(float32) float32
		}{{"scalar", Tanhf}} {
			b.Run(fmt.Sprintf("sd%g/%s", sc, f.name), func(b *testing.B) {
				for b.Loop() {
					for _, v := range x {
						s += f.fn(v)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/elem")
			})
		}
		dst := make([]float32, len(x))
		b.Run(fmt.Sprintf("sd%g/slice", sc), func(b *testing.B) {
			for b.Loop() {
				tanhfSlice(dst, x)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/elem")
		})
		_ = s
	}
}
