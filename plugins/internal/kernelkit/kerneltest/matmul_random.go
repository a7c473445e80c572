package kerneltest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// matMulRandomTypes are the types whose matrix × matrix paths (four-row
// and eight-row kernels, with their tails of one row, or of two and three
// rows together) MatMulRandom checks.
var matMulRandomTypes = []quant.Type{quant.Q2_K, quant.TQ1_0, quant.TQ2_0, quant.IQ4_NL, quant.IQ4_XS, quant.Q4_1, quant.Q5_1,
	quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ3_XXS, quant.IQ3_S, quant.IQ1_S, quant.IQ1_M}

// MatMulRandom runs MatMul on random shapes (1-21 weight rows, 1-9
// blocks, 1-13 activation rows: four-row passes with every tail, and
// eight-row groups with a remainder) and random blocks, about 20k weight
// blocks per type and level (each against every activation row), and
// demands every output be core/quant's reference dot product bit for bit.
func MatMulRandom(t *testing.T, k *kernelkit.Kit) {
	forEachLevel(t, k, func(t *testing.T) {
		for _, typ := range matMulRandomTypes {
			t.Run(typ.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(typ), 21))
				blocks, budget := 0, 20_000
				if testing.Short() {
					budget /= 10
				}
				for blocks < budget {
					rows, nb, m := 1+r.IntN(21), 1+r.IntN(9), 1+r.IntN(13)
					n := nb * typ.BlockSize()
					blocks += rows * nb
					checkMatMul(t, k, typ, rows, n, m, r)
				}
				t.Logf("%d weight blocks: every output bit for bit the reference's", blocks)
			})
		}
	})
}

// checkMatMul runs one random rows × n by m × n product on 1 and 3
// threads and compares each output's bits with quant.VecDot's.
func checkMatMul(t *testing.T, k *kernelkit.Kit, typ quant.Type, rows, n, m int, r *rand.Rand) {
	t.Helper()
	var w, act []byte
	for range rows {
		w = append(w, randWeights(r, typ, n)...)
	}
	for range m {
		act = append(act, randActs(r, typ, n)...)
	}
	wrow, _ := quant.RowSize(typ, int64(n))
	arow, _ := quant.RowSize(typ.VecDotType(), int64(n))
	for _, threads := range []int{1, 3} {
		got := make([]float32, m*rows)
		if err := k.MatMul(typ, w, rows, n, act, m, got, threads); err != nil {
			t.Fatal(err)
		}
		for i, g := range got {
			j, row := i/rows, i%rows
			want, err := quant.VecDot(typ, n, w[int64(row)*wrow:int64(row+1)*wrow], act[int64(j)*arow:int64(j+1)*arow])
			if err != nil {
				t.Fatal(err)
			}
			if math.Float32bits(g) != math.Float32bits(want) {
				t.Fatalf("%s rows=%d n=%d m=%d threads=%d: row %d of activation %d is %g (%#08x), reference %g (%#08x)",
					typ, rows, n, m, threads, row, j, g, math.Float32bits(g), want, math.Float32bits(want))
			}
		}
	}
}
