//go:build !noasm

package kernelsavx512

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// The q36 kernels against the ones they replace: the same float, bit for
// bit, on random blocks (the kerneltest suite checks the registered ones
// against the reference), and Q36_SPEED=1 times them side by side.

func q36Pairs() []kernelPair {
	pair := func(name string, bsize, off int, old, new func(w, a *byte, nb int) float32, oldT, newT func(w, a *byte, nb int, acc *[9]float32, pf *byte)) kernelPair {
		data := func(r *rand.Rand, nb int) ([]byte, []byte) { return q36Data(r, bsize, off, nb) }
		return kernelPair{name, bsize, data, old, new, oldT, newT}
	}
	return []kernelPair{
		pair("q3_K", 110, 4, dotQ3KPVBMIVNNI256, q36DotQ3KPVBMIVNNI256, lrDotQ3KPVBMITVNNI256, q36LrDotQ3KPVBMITVNNI256),
		pair("q6_K", 210, 32, dotQ6KPVBMIVNNI256, q36DotQ6KPVBMIVNNI256, lrDotQ6KPVBMITVNNI256, q36LrDotQ6KPVBMITVNNI256),
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
	a, pa := randQ8K(r, nb)
	kernelkit.PrepareQ8K(a, nb, pa, off)
	return w, pa
}

func TestQ36Exact(t *testing.T) {
	if !cpu.vbmiQ3 {
		t.Skip("no VBMI+GFNI")
	}
	checkPairsExact(t, 36, q36Pairs())
}

// TestQ36Speed: Q36_SPEED=1 times old and new side by side (timePairs).
func TestQ36Speed(t *testing.T) {
	if !cpu.vbmiQ3 {
		t.Skip("no VBMI+GFNI")
	}
	timePairs(t, "Q36", q36Pairs())
}
