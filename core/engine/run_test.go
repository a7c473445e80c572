package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/state"
)

// counter is a model whose logits favour (last token + 1) mod vocab and
// that records the batch sizes it is called with.
type counter struct{ calls []int }

func (c *counter) Params() model.Params  { return model.Params{Vocab: 5} }
func (c *counter) NewState() model.State { return &state.Sequence{} }
func (c *counter) Forward(s model.State, toks []int32, all bool, logits []float32) error {
	c.calls = append(c.calls, len(toks))
	seq := s.(*state.Sequence)
	rows := 1
	if all {
		rows = len(toks)
	}
	for r := 0; r < rows; r++ {
		tok := toks[len(toks)-rows+r]
		row := logits[r*5 : (r+1)*5]
		clear(row)
		row[(tok+1)%5] = float32(seq.N + r + 1)
	}
	seq.N += len(toks)
	return nil
}

func TestRunner(t *testing.T) {
	toks := []int32{0, 1, 2, 3, 4, 0, 1}
	for _, tc := range []struct {
		mode  Mode
		ub    int
		calls []int
	}{
		{Batch, 3, []int{3, 3, 1}},
		{Batch, 0, []int{7}},
		{Step, 3, []int{1, 1, 1, 1, 1, 1, 1}},
	} {
		m := &counter{}
		r := NewRunner(m, tc.mode, tc.ub)
		all, err := r.Prefill(toks, true)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(tc.calls, m.calls); d != "" {
			t.Errorf("mode %d ub %d: calls %s", tc.mode, tc.ub, d)
		}
		for i, tok := range toks {
			if got := Argmax(all[i*5 : (i+1)*5]); got != (tok+1)%5 {
				t.Errorf("position %d: argmax %d", i, got)
			}
		}
		gen, err := r.Greedy(all[6*5:], 4)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff([]int32{2, 3, 4, 0}, gen); d != "" {
			t.Errorf("greedy %s", d)
		}
	}
	if _, err := ParseMode("fast"); err == nil {
		t.Error("bad mode accepted")
	}
}
