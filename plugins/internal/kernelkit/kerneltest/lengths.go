package kerneltest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// RowLengths covers what the fixed 512/1024-element rows of the other
// tests miss: every row length from 1 to 40 blocks (the kernels' tails
// after their 2-, 4- and 8-block steps) and row counts that leave 1..7
// rows after MatVec's eight-row groups, on every level, each output bit
// for bit the reference's.
func RowLengths(t *testing.T, k *kernelkit.Kit) {
	forEachLevel(t, k, func(t *testing.T) {
		for _, typ := range kernelTypes {
			t.Run(typ.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(typ), 5))
				bs := typ.BlockSize()
				if bs == 1 {
					bs = 32
				}
				for nb := 1; nb <= 40; nb++ {
					n := nb * bs
					rows := 1 + r.IntN(27)
					if testing.Short() && nb%4 != 0 {
						continue
					}
					var w []byte
					for range rows {
						w = append(w, randWeights(r, typ, n)...)
					}
					act := randActs(r, typ, n)
					wrow, _ := quant.RowSize(typ, int64(n))
					out := make([]float32, rows)
					if err := k.MatVec(typ, w, rows, n, act, out, 1); err != nil {
						t.Fatal(err)
					}
					for i := range rows {
						want, err := quant.VecDot(typ, n, w[int64(i)*wrow:], act)
						if err != nil {
							t.Fatal(err)
						}
						got, err := k.Dot(typ, n, w[int64(i)*wrow:], act)
						if err != nil {
							t.Fatal(err)
						}
						if !sameFloat(got, want) || !sameFloat(out[i], want) {
							t.Fatalf("n=%d rows=%d row %d: Dot %g (%#08x), MatVec %g, reference %g (%#08x)",
								n, rows, i, got, math.Float32bits(got), out[i], want, math.Float32bits(want))
						}
					}
				}
			})
		}
	})
}
