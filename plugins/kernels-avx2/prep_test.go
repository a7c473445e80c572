//go:build !noasm

package kernelsavx2

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// TestPrepQ8K checks the assembly activation preparation against
// kernelkit's Go one on random Q8_K bytes (the quants' whole range; d is
// copied as is), for both quant offsets.
func TestPrepQ8K(t *testing.T) {
	if !hasAVX2 {
		t.Skip("CPU lacks the instruction set")
	}
	const nb, block = 5, 576
	r := rand.New(rand.NewPCG(1, 2))
	a := make([]byte, nb*292)
	for i := range a {
		a[i] = byte(r.Uint32())
	}
	for _, off := range []int{4, 32} {
		want, got := make([]byte, nb*block), make([]byte, nb*block)
		kernelkit.PrepareQ8K(a, nb, want, off)
		q63PrepQ8KAVX2(&a[0], nb, &got[0], off)
		for b := range nb {
			w, g := want[b*block:b*block+516], got[b*block:b*block+516]
			if !bytes.Equal(w, g) {
				t.Fatalf("off %d block %d: asm differs from Go\n got %x\nwant %x", off, b, g, w)
			}
		}
	}
}
