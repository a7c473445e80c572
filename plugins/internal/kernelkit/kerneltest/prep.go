package kerneltest

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// PrepQ8K checks a plugin's assembly activation preparation (the prepared
// Q8_K rows the exact Q3_K/Q6_K kernels read) against kernelkit's Go one
// on random Q8_K bytes (the quants' whole range; d is copied as is), for
// both quant offsets.
func PrepQ8K(t *testing.T, prep func(a *byte, nb int, dst *byte, off int)) {
	const nb, block = 5, 576
	r := rand.New(rand.NewPCG(1, 2))
	a := make([]byte, nb*292)
	for i := range a {
		a[i] = byte(r.Uint32())
	}
	for _, off := range []int{4, 32} {
		want, got := make([]byte, nb*block), make([]byte, nb*block)
		kernelkit.PrepareQ8K(a, nb, want, off)
		prep(&a[0], nb, &got[0], off)
		for b := range nb {
			w, g := want[b*block:b*block+516], got[b*block:b*block+516]
			if !bytes.Equal(w, g) {
				t.Fatalf("off %d block %d: asm differs from Go\n got %x\nwant %x", off, b, g, w)
			}
		}
	}
}

// PrepQ45 checks a plugin's assembly preparation of the compact groups of
// four rows the Q4_K/Q5_K four-row kernels read against kernelkit's Go
// one, padding included, on random Q8_K blocks (whose bsums are the sums
// of their quants, as quantization makes them; -128 everywhere included).
func PrepQ45(t *testing.T, prep func(a *byte, astride, nb int, dst *byte)) {
	const nb, block, arow = 5, 1152, 5*292 + 20
	r := rand.New(rand.NewPCG(3, 4))
	a := make([]byte, 3*arow+nb*292)
	for i := range a {
		a[i] = byte(r.Uint32())
	}
	for row := range 4 {
		for b := range nb {
			q := a[row*arow+b*292 : row*arow+(b+1)*292]
			if row == 3 && b == 0 {
				for i := 4; i < 260; i++ {
					q[i] = 0x80
				}
			}
			for j := range 16 {
				s := 0
				for _, v := range q[4+16*j : 20+16*j] {
					s += int(int8(v))
				}
				binary.LittleEndian.PutUint16(q[260+2*j:], uint16(int16(s)))
			}
		}
	}
	want, got := make([]byte, nb*block), make([]byte, nb*block)
	for i := range got {
		got[i] = 0xa5
	}
	kernelkit.PrepareQ45(a, arow, nb, want)
	prep(&a[0], arow, nb, &got[0])
	if !bytes.Equal(want, got) {
		t.Fatalf("asm differs from Go\n got %x\nwant %x", got, want)
	}
}
