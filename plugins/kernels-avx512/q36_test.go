//go:build !noasm

package kernelsavx512

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
	"time"
	"unsafe"

	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// The q36 kernels against the ones they replace: the same float, bit for
// bit, on random blocks (the kerneltest suite checks the registered ones
// against the reference), and Q36_SPEED=1 times them side by side.

type q36Pair struct {
	name       string
	bsize, off int
	old, new   func(w, a *byte, nb int) float32
	oldT, newT func(w, a *byte, nb int, acc *[9]float32, pf *byte)
}

func q36Pairs() []q36Pair {
	return []q36Pair{
		{"q3_K", 110, 4, dotQ3KPVBMIVNNI256, q36DotQ3KPVBMIVNNI256, lrDotQ3KPVBMITVNNI256, q36LrDotQ3KPVBMITVNNI256},
		{"q6_K", 210, 32, dotQ6KPVBMIVNNI256, q36DotQ6KPVBMIVNNI256, lrDotQ6KPVBMITVNNI256, q36LrDotQ6KPVBMITVNNI256},
	}
}

func q36Data(r *rand.Rand, bsize, off, nb int) (w, pa []byte) {
	w = make([]byte, bsize*nb)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for b := 0; b < nb; b++ {
		h := uint16(0x3000 + r.IntN(0x1800)) // fp16 d in [2^-3, 2^3)
		if r.IntN(2) == 0 {
			h |= 0x8000
		}
		binary.LittleEndian.PutUint16(w[b*bsize+bsize-2:], h)
	}
	a := make([]byte, 292*nb)
	for b := 0; b < nb; b++ {
		d := float32(math.Pow(2, -10*r.Float64()))
		binary.LittleEndian.PutUint32(a[292*b:], math.Float32bits(d))
		for i := 0; i < 256; i++ {
			a[292*b+4+i] = byte(int8(r.IntN(255) - 127))
		}
	}
	buf := make([]byte, 576*nb+64)
	al := int(-uintptr(unsafe.Pointer(&buf[0])) & 63)
	pa = buf[al : al+576*nb]
	kernelkit.PrepareQ8K(a, nb, pa, off)
	return w, pa
}

func TestQ36Exact(t *testing.T) {
	if !cpu.vbmiQ3 {
		t.Skip("no VBMI+GFNI")
	}
	r := rand.New(rand.NewPCG(36, 36))
	for _, p := range q36Pairs() {
		for iter := 0; iter < 3000; iter++ {
			nb := 1 + r.IntN(24)
			w, pa := q36Data(r, p.bsize, p.off, nb)
			a, b := p.old(&w[0], &pa[0], nb), p.new(&w[0], &pa[0], nb)
			if math.Float32bits(a) != math.Float32bits(b) {
				t.Fatalf("%s nb %d: old %v new %v", p.name, nb, a, b)
			}
			var accA, accB [9]float32
			for i := range 8 {
				accA[i] = float32(r.NormFloat64())
				accB[i] = accA[i]
			}
			p.oldT(&w[0], &pa[0], nb, &accA, &w[0])
			p.newT(&w[0], &pa[0], nb, &accB, &w[0])
			for i := range 8 {
				if math.Float32bits(accA[i]) != math.Float32bits(accB[i]) {
					t.Fatalf("%s tile nb %d lane %d: old %v new %v", p.name, nb, i, accA[i], accB[i])
				}
			}
		}
	}
}

// TestQ36Speed: Q36_SPEED=1, Q36_ROWS (default 64) rows of Q36_NB blocks
// (default 16), old and new alternately; min time per pass.
func TestQ36Speed(t *testing.T) {
	if os.Getenv("Q36_SPEED") != "1" || !cpu.vbmiQ3 {
		t.Skip("Q36_SPEED=1")
	}
	env := func(k string, d int) int {
		var v int
		for _, c := range os.Getenv(k) {
			v = 10*v + int(c-'0')
		}
		if v == 0 {
			return d
		}
		return v
	}
	rows, nb := env("Q36_ROWS", 64), env("Q36_NB", 16)
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range q36Pairs() {
		if f := os.Getenv("Q36_TYPE"); f != "" && f != p.name {
			continue
		}
		w, pa := q36Data(r, p.bsize, p.off, nb*rows)
		pa = pa[:576*nb]
		var sink float32
		run := func(f func(w, a *byte, nb int) float32) time.Duration {
			best := time.Hour
			for rep := 0; rep < 30; rep++ {
				t0 := time.Now()
				for k := 0; k < rows; k++ {
					sink += f(&w[k*nb*p.bsize], &pa[0], nb)
				}
				best = min(best, time.Since(t0))
			}
			return best
		}
		var ro, rn []float64
		for round := 0; round < 40; round++ {
			ro = append(ro, float64(run(p.old)))
			rn = append(rn, float64(run(p.new)))
		}
		sort.Float64s(ro)
		sort.Float64s(rn)
		bytes := float64(rows * nb * p.bsize)
		t.Logf("%s %dx%d: old %.2f GB/s new %.2f GB/s (min), new/old %.3f; medians %.2f %.2f", p.name, rows, nb,
			bytes/ro[0], bytes/rn[0], ro[0]/rn[0], bytes/ro[len(ro)/2], bytes/rn[len(rn)/2])
		_ = sink
	}
}

// TestQ36DRAM: Q36_SPEED=1, rows from DRAM (Q36_MB MiB of weights, default
// 64), one row of 16 blocks at a time, as MatVec walks them.
func TestQ36DRAM(t *testing.T) {
	if os.Getenv("Q36_SPEED") != "1" || !cpu.vbmiQ3 {
		t.Skip("Q36_SPEED=1")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, p := range q36Pairs() {
		if f := os.Getenv("Q36_TYPE"); f != "" && f != p.name {
			continue
		}
		const nb = 16
		rows := 64 << 20 / (nb * p.bsize)
		w0, pa := q36Data(r, p.bsize, p.off, nb)
		w := make([]byte, rows*nb*p.bsize)
		for k := 0; k < rows; k++ {
			copy(w[k*nb*p.bsize:], w0)
		}
		var sink float32
		run := func(f func(w, a *byte, nb int) float32) float64 {
			t0 := time.Now()
			for k := 0; k < rows; k++ {
				sink += f(&w[k*nb*p.bsize], &pa[0], nb)
			}
			return float64(len(w)) / float64(time.Since(t0))
		}
		var ro, rn []float64
		for round := 0; round < 9; round++ {
			ro = append(ro, run(p.old))
			rn = append(rn, run(p.new))
		}
		sort.Float64s(ro)
		sort.Float64s(rn)
		t.Logf("%s DRAM %d MiB: old %.2f new %.2f GB/s (best); medians %.2f %.2f", p.name, len(w)>>20, ro[8], rn[8], ro[4], rn[4])
		_ = sink
	}
}
