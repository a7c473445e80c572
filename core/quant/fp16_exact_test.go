package quant

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// fp32ToFP16Ref is ggml's scalar ggml_compute_fp32_to_fp16 (the FP16
// library's float algorithm), the definition FP32ToFP16 must match bit for bit.
func fp32ToFP16Ref(f float32) uint16 {
	const scaleToInf = float32(0x1.0p+112)
	const scaleToZero = float32(0x1.0p-110)
	base := float32(float32(abs32(f)*scaleToInf) * scaleToZero)

	w := math.Float32bits(f)
	shl1W := w + w
	sign := w & 0x80000000
	bias := shl1W & 0xFF000000
	if bias < 0x71000000 {
		bias = 0x71000000
	}

	base = math.Float32frombits((bias>>1)+0x07800000) + base
	bits := math.Float32bits(base)
	expBits := (bits >> 13) & 0x00007C00
	mantissaBits := bits & 0x00000FFF
	nonsign := expBits + mantissaBits
	if shl1W > 0xFF000000 {
		nonsign = 0x7E00
	}
	return uint16(sign>>16) | uint16(nonsign)
}

func checkFP16Bits(t *testing.T, w uint32) bool {
	f := math.Float32frombits(w)
	want := fp32ToFP16Ref(f)
	if got := FP32ToFP16(f); got != want {
		t.Errorf("FP32ToFP16(%#08x) = %#04x, want %#04x", w, got, want)
		return false
	}
	if got, want := math.Float32bits(RoundFP16(f)), math.Float32bits(FP16ToFP32(want)); got != want {
		t.Errorf("RoundFP16(%#08x) = %#08x, want %#08x", w, got, want)
		return false
	}
	return true
}

// TestFP32ToFP16Sampled covers the boundaries of every rounding region and
// random inputs, fast enough for -short.
func TestFP32ToFP16Sampled(t *testing.T) {
	var edges []uint32
	for _, b := range []uint32{0, 0x33000000, 0x33800000, 0x387fe000, 0x38800000, 0x3f800000,
		0x477fe000, 0x477ff000, 0x47800000, 0x7f7fffff, 0x7f800000, 0x7f800001, 0x7fc00000, 0x7fffffff} {
		for d := uint32(0); d < 0x4000; d++ {
			edges = append(edges, b+d, b-d)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1 << 20 {
		edges = append(edges, rng.Uint32())
	}
	fails := 0
	for _, w := range edges {
		for _, s := range []uint32{0, 0x80000000} {
			if !checkFP16Bits(t, w^s) {
				if fails++; fails > 10 {
					t.FailNow()
				}
			}
		}
	}
}

// TestFP32ToFP16Exhaustive checks every float32, in parallel.
func TestFP32ToFP16Exhaustive(t *testing.T) {
	if testing.Short() {
		t.Skip("all 2^32 inputs: not in -short")
	}
	const parts = 256
	var wg sync.WaitGroup
	next := make(chan uint32, parts)
	for p := range uint32(parts) {
		next <- p
	}
	close(next)
	var mu sync.Mutex
	bad := 0
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for p := range next {
				lo := p << 24
				for i := uint32(0); i < 1<<24; i++ {
					w := lo + i
					f := math.Float32frombits(w)
					h := FP32ToFP16(f)
					if h != fp32ToFP16Ref(f) || math.Float32bits(RoundFP16(f)) != math.Float32bits(FP16ToFP32(h)) {
						mu.Lock()
						if bad++; bad <= 10 {
							checkFP16Bits(t, w)
						}
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	if bad > 0 {
		t.Fatalf("%d inputs differ", bad)
	}
}

func BenchmarkFP32ToFP16(b *testing.B) {
	x := make([]float32, 4096)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	h := make([]uint16, len(x))
	b.Run("new", func(b *testing.B) {
		for b.Loop() {
			for i, v := range x {
				h[i] = FP32ToFP16(v)
			}
		}
	})
	b.Run("ref", func(b *testing.B) {
		for b.Loop() {
			for i, v := range x {
				h[i] = fp32ToFP16Ref(v)
			}
		}
	})
	r := make([]float32, len(x))
	b.Run("round", func(b *testing.B) {
		for b.Loop() {
			for i, v := range x {
				r[i] = RoundFP16(v)
			}
		}
	})
	b.Run("round-via-table", func(b *testing.B) {
		for b.Loop() {
			for i, v := range x {
				r[i] = FP16ToFP32(FP32ToFP16(v))
			}
		}
	})
}
