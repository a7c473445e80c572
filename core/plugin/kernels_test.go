package plugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/quant"
)

// TestMatMulOp: a typed matrix product survives its wire form (flags
// packed where protocol 2 put them), and a malformed one is refused with
// what is wrong.
func TestMatMulOp(t *testing.T) {
	w := WeightRef{Region: 1, Offset: 64, Type: quant.Q4_K, Shape: []int64{256, 8}}
	for _, m := range []MatMul{
		{Weight: w, Input: ArenaRef{0, 4096}, Output: ArenaRef{4096, 128}, Rows: 4},
		{Weight: w, Input: ArenaRef{0, 4096}, Output: ArenaRef{4096, 128}, Rows: 4, Transient: true},
		{Weight: w, Input: ArenaRef{0, 4096}, Output: ArenaRef{4096, 128}, Rows: 1, Transient: true, FastFloat: true},
	} {
		op := m.Op()
		got, err := op.MatMul()
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(m, got); d != "" {
			t.Errorf("(-sent +read):\n%s", d)
		}
	}
	if got := (MatMul{Weight: w, Rows: 2, FastFloat: true}).Op().Ints; !cmp.Equal(got, []int64{2, flagFastFloat}) {
		t.Errorf("wire ints %v", got)
	}
	good := MatMul{Weight: w, Rows: 2}.Op()
	for _, c := range []struct {
		edit func(*Op)
		want string
	}{
		{func(o *Op) { o.Name = "softmax" }, `"softmax" is not "matmul"`},
		{func(o *Op) { o.Inputs = nil }, "want 1 weight, 1 input, 1 output and n"},
		{func(o *Op) { o.Weights = []WeightRef{{Shape: []int64{5}}} }, "not a matrix"},
		{func(o *Op) { o.Ints = []int64{0} }, "0 activation rows"},
		{func(o *Op) { o.Ints = []int64{1, 4} }, "unknown flags 0x4"},
	} {
		op := good
		op.Weights = append([]WeightRef(nil), good.Weights...)
		c.edit(&op)
		if _, err := op.MatMul(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}
