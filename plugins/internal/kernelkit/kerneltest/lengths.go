package kerneltest

import (
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
					checkMatVec(t, k, typ, n, w, act)
					wrow, _ := quant.RowSize(typ, int64(n))
					for i := range rows {
						checkDot(t, k, typ, n, w[int64(i)*wrow:int64(i+1)*wrow], act)
					}
				}
			})
		}
	})
}
