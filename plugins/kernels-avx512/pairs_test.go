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
)

// kernelPair is a kernel and the one it replaces (kept generated as its
// oracle), for the prepared one-row kernels and their tile variants.
type kernelPair struct {
	name  string
	bsize int // bytes per weight block
	// data returns nb random weight blocks and a prepared activation row
	// of nb blocks as the kernels read them.
	data       func(r *rand.Rand, nb int) (w, pa []byte)
	old, new   func(w, a *byte, nb int) float32
	oldT, newT func(w, a *byte, nb int, acc *[9]float32, pf *byte)
}

// checkPairsExact: old and new give the same float bits on 3000 random
// rows of 1-24 blocks each, one-row and tile kernels (the kerneltest suite
// checks the registered kernels against the reference).
func checkPairsExact(t *testing.T, seed uint64, pairs []kernelPair) {
	r := rand.New(rand.NewPCG(seed, seed))
	for _, p := range pairs {
		for iter := 0; iter < 3000; iter++ {
			nb := 1 + r.IntN(24)
			w, pa := p.data(r, nb)
			a, b := p.old(&w[0], &pa[0], nb), p.new(&w[0], &pa[0], nb)
			if math.Float32bits(a) != math.Float32bits(b) {
				t.Fatalf("%s nb %d: old %v new %v", p.name, nb, a, b)
			}
			var accA, accB [9]float32
			for i := range accA {
				accA[i] = float32(r.NormFloat64())
				accB[i] = accA[i]
			}
			p.oldT(&w[0], &pa[0], nb, &accA, &w[0])
			p.newT(&w[0], &pa[0], nb, &accB, &w[0])
			for i := range accA {
				if math.Float32bits(accA[i]) != math.Float32bits(accB[i]) {
					t.Fatalf("%s tile nb %d lane %d: old %v new %v", p.name, nb, i, accA[i], accB[i])
				}
			}
		}
	}
}

// timePairs times old and new alternately when PREFIX_SPEED=1: rows that
// stay in cache (PREFIX_ROWS rows, default 64, of PREFIX_NB blocks,
// default 16; best pass of 30, 40 rounds) and rows streamed from memory
// (PREFIX_MB MiB, default 64, walked once a round as MatVec walks them;
// 9 rounds). PREFIX_TYPE picks one pair by name.
func timePairs(t *testing.T, prefix string, pairs []kernelPair) {
	if os.Getenv(prefix+"_SPEED") != "1" {
		t.Skip(prefix + "_SPEED=1")
	}
	env := func(k string, d int) int {
		var v int
		for _, c := range os.Getenv(prefix + "_" + k) {
			v = 10*v + int(c-'0')
		}
		if v == 0 {
			return d
		}
		return v
	}
	rows, nb, mb := env("ROWS", 64), env("NB", 16), env("MB", 64)
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range pairs {
		if f := os.Getenv(prefix + "_TYPE"); f != "" && f != p.name {
			continue
		}
		var sink float32
		// In cache.
		w, pa := p.data(r, nb*rows)
		pa = pa[:576*nb]
		pass := func(f func(w, a *byte, nb int) float32) time.Duration {
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
			ro = append(ro, float64(pass(p.old)))
			rn = append(rn, float64(pass(p.new)))
		}
		sort.Float64s(ro)
		sort.Float64s(rn)
		bytes := float64(rows * nb * p.bsize)
		t.Logf("%s %dx%d: old %.2f GB/s new %.2f GB/s (min), new/old %.3f; medians %.2f %.2f", p.name, rows, nb,
			bytes/ro[0], bytes/rn[0], ro[0]/rn[0], bytes/ro[len(ro)/2], bytes/rn[len(rn)/2])
		// From memory.
		n := mb << 20 / (nb * p.bsize)
		w0, pa := p.data(r, nb)
		w = make([]byte, n*nb*p.bsize)
		for k := 0; k < n; k++ {
			copy(w[k*nb*p.bsize:], w0)
		}
		stream := func(f func(w, a *byte, nb int) float32) float64 {
			t0 := time.Now()
			for k := 0; k < n; k++ {
				sink += f(&w[k*nb*p.bsize], &pa[0], nb)
			}
			return float64(len(w)) / float64(time.Since(t0))
		}
		ro, rn = ro[:0], rn[:0]
		for round := 0; round < 9; round++ {
			ro = append(ro, stream(p.old))
			rn = append(rn, stream(p.new))
		}
		sort.Float64s(ro)
		sort.Float64s(rn)
		t.Logf("%s memory %d MiB: old %.2f new %.2f GB/s (best); medians %.2f %.2f", p.name, len(w)>>20, ro[8], rn[8], ro[4], rn[4])
		_ = sink
	}
}

// randQ8K returns nb random Q8_K activation blocks (float32 d in
// [2^-10, 1], 256 int8s in [-127, 127], the 16 int16 bsums) and a
// 64-byte-aligned buffer of nb 576-byte prepared blocks for them.
func randQ8K(r *rand.Rand, nb int) (a, prepared []byte) {
	a = make([]byte, 292*nb)
	for b := 0; b < nb; b++ {
		d := float32(math.Pow(2, -10*r.Float64()))
		binary.LittleEndian.PutUint32(a[292*b:], math.Float32bits(d))
		for j := 0; j < 16; j++ {
			s := 0
			for i := 16 * j; i < 16*j+16; i++ {
				v := int8(r.IntN(255) - 127)
				a[292*b+4+i] = byte(v)
				s += int(v)
			}
			binary.LittleEndian.PutUint16(a[292*b+260+2*j:], uint16(int16(s)))
		}
	}
	buf := make([]byte, 576*nb+64)
	al := int(-uintptr(unsafe.Pointer(&buf[0])) & 63)
	return a, buf[al : al+576*nb]
}
