//go:build !noasm

package kernelsavx512

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// The q4v kernels (tools/asmgen/q4v.go) against the ones they replace:
// the same float, bit for bit, on random blocks (the kerneltest suite
// checks the registered ones against the reference), and Q4V_SPEED=1
// times them side by side.

func q4vPairs() []kernelPair {
	data := func(bsize int) func(r *rand.Rand, nb int) ([]byte, []byte) {
		return func(r *rand.Rand, nb int) ([]byte, []byte) { return q4vData(r, bsize, nb) }
	}
	return []kernelPair{
		{"q4_K", 144, data(144), dotQ4KPVNNI256, q4vDotQ4KPVNNI256, dotQ4KPTVNNI256, q4vDotQ4KPTVNNI256},
		{"q5_K", 176, data(176), dotQ5KPVNNI256, q4vDotQ5KPVNNI256, dotQ5KPTVNNI256, q4vDotQ5KPTVNNI256},
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
	a, pa := randQ8K(r, nb)
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
	checkPairsExact(t, 4, q4vPairs())
}

// TestQ4VSpeed: Q4V_SPEED=1 times old and new side by side (timePairs).
func TestQ4VSpeed(t *testing.T) {
	if !cpu.vbmiGFNI {
		t.Skip("no VBMI+GFNI")
	}
	timePairs(t, "Q4V", q4vPairs())
}
