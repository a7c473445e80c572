package kerneltest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// MatMulRandom checks MatMul against the reference's dot product, bit for
// bit, on random rows: an odd number of weight rows (37) times 4 to 7
// activation rows, which runs the four-row kernels where a level has them
// and the one-row kernels on the tail, 12 products per block type (4
// with -short; about 10k block products in all), each output against
// quant.VecDot itself.
func MatMulRandom(t *testing.T, k *kernelkit.Kit) {
	forEachLevel(t, k, func(t *testing.T) {
		for _, typ := range kernelTypes {
			if typ.BlockSize() == 1 {
				continue
			}
			t.Run(typ.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(typ), 5))
				const rows = 37
				n := 4 * 256
				iters := 12
				if testing.Short() {
					iters = 4
				}
				wrow, _ := quant.RowSize(typ, int64(n))
				arow, _ := quant.RowSize(typ.VecDotType(), int64(n))
				for it := range iters {
					m := 4 + it%4
					var w, act []byte
					for range rows {
						w = append(w, randWeights(r, typ, n)...)
					}
					for range m {
						act = append(act, randActs(r, typ, n)...)
					}
					got := make([]float32, m*rows)
					if err := k.MatMul(typ, w, rows, n, act, m, got, 1); err != nil {
						t.Fatal(err)
					}
					for j := range m {
						for i := range rows {
							want, err := quant.VecDot(typ, n, w[int64(i)*wrow:int64(i+1)*wrow], act[int64(j)*arow:int64(j+1)*arow])
							if err != nil {
								t.Fatal(err)
							}
							if g := got[j*rows+i]; !sameFloat(g, want) {
								t.Fatalf("m=%d: row %d · activation %d = %g (%#08x), reference %g (%#08x)",
									m, i, j, g, math.Float32bits(g), want, math.Float32bits(want))
							}
						}
					}
				}
			})
		}
	})
}
