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

// The q4v kernels (tools/asmgen/q4v.go) against the ones they replace:
// the same float, bit for bit, on random blocks (the kerneltest suite
// checks the registered ones against the reference), and Q4V_SPEED=1
// times them side by side.

func q4vPairs() []q36Pair {
	return []q36Pair{
		{"q4_K", 144, 0, dotQ4KPVNNI256, q4vDotQ4KPVNNI256, dotQ4KPTVNNI256, q4vDotQ4KPTVNNI256},
		{"q5_K", 176, 0, dotQ5KPVNNI256, q4vDotQ5KPVNNI256, dotQ5KPTVNNI256, q4vDotQ5KPTVNNI256},
	}
}

// q4vData returns nb random blocks of bsize bytes (fp16 d and dmin at 0
// and 2) and a prepared activation row of nb blocks with its bsums, as
// kernelkit prepares Q4_K/Q5_K rows.
func q4vData(r *rand.Rand, bsize, nb int) (w, pa []byte) {
	w = make([]byte, bsize*nb)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for b := 0; b < nb; b++ {
		for k := 0; k < 2; k++ {
			h := uint16(0x3000 + r.IntN(0x1800)) // fp16 in [2^-3, 2^3)
			if r.IntN(2) == 0 {
				h |= 0x8000
			}
			binary.LittleEndian.PutUint16(w[b*bsize+2*k:], h)
		}
	}
	a := make([]byte, 292*nb)
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
	pa = buf[al : al+576*nb]
	kernelkit.PrepareQ8K(a, nb, pa, 0)
	for b := 0; b < nb; b++ {
		copy(pa[576*b+516:576*b+548], a[292*b+260:292*(b+1)])
		for k := 0; k < 8; k++ {
			s := int16(binary.LittleEndian.Uint16(a[292*b+260+4*k:])) + int16(binary.LittleEndian.Uint16(a[292*b+262+4*k:]))
			binary.LittleEndian.PutUint16(pa[576*b+548+2*k:], uint16(s))
		}
	}
	return w, pa
}

func TestQ4VExact(t *testing.T) {
	if !cpu.vbmiGFNI {
		t.Skip("no VBMI+GFNI")
	}
	r := rand.New(rand.NewPCG(4, 4))
	for _, p := range q4vPairs() {
		for iter := 0; iter < 3000; iter++ {
			nb := 1 + r.IntN(24)
			w, pa := q4vData(r, p.bsize, nb)
			a, b := p.old(&w[0], &pa[0], nb), p.new(&w[0], &pa[0], nb)
			if math.Float32bits(a) != math.Float32bits(b) {
				t.Fatalf("%s nb %d: old %v new %v", p.name, nb, a, b)
			}
			var accA, accB [9]float32
			for i := range 9 {
				accA[i] = float32(r.NormFloat64())
				accB[i] = accA[i]
			}
			p.oldT(&w[0], &pa[0], nb, &accA, &w[0])
			p.newT(&w[0], &pa[0], nb, &accB, &w[0])
			for i := range 9 {
				if math.Float32bits(accA[i]) != math.Float32bits(accB[i]) {
					t.Fatalf("%s tile nb %d lane %d: old %v new %v", p.name, nb, i, accA[i], accB[i])
				}
			}
		}
	}
}

func q4vEnv(k string, d int) int {
	var v int
	for _, c := range os.Getenv(k) {
		v = 10*v + int(c-'0')
	}
	if v == 0 {
		return d
	}
	return v
}

// TestQ4VSpeed: Q4V_SPEED=1, Q4V_ROWS (default 64) rows of Q4V_NB blocks
// (default 16), old and new alternately; min time per pass.
func TestQ4VSpeed(t *testing.T) {
	if os.Getenv("Q4V_SPEED") != "1" || !cpu.vbmiGFNI {
		t.Skip("Q4V_SPEED=1")
	}
	rows, nb := q4vEnv("Q4V_ROWS", 64), q4vEnv("Q4V_NB", 16)
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range q4vPairs() {
		if f := os.Getenv("Q4V_TYPE"); f != "" && f != p.name {
			continue
		}
		w, pa := q4vData(r, p.bsize, nb*rows)
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

// TestQ4VDRAM: Q4V_SPEED=1, rows from DRAM (Q4V_MB MiB of weights, default
// 64), one row of Q4V_NB blocks at a time, as MatVec walks them.
func TestQ4VDRAM(t *testing.T) {
	if os.Getenv("Q4V_SPEED") != "1" || !cpu.vbmiGFNI {
		t.Skip("Q4V_SPEED=1")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, p := range q4vPairs() {
		if f := os.Getenv("Q4V_TYPE"); f != "" && f != p.name {
			continue
		}
		nb := q4vEnv("Q4V_NB", 16)
		rows := q4vEnv("Q4V_MB", 64) << 20 / (nb * p.bsize)
		w0, pa := q4vData(r, p.bsize, nb)
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
