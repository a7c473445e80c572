package moe

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestRoute(t *testing.T) {
	logits := []float32{0.5, -1, 2, 0.1, 1.5, -0.3, 0.9, 0.2}
	sig := func(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }
	tests := []struct {
		name    string
		r       Router
		bias    []float32
		ids     []int32
		weights []float32
	}{
		{
			name:    "sigmoid top2",
			r:       Router{Experts: 8, Used: 2, Gating: GatingSigmoid},
			ids:     []int32{2, 4},
			weights: []float32{sig(2), sig(1.5)},
		},
		{
			name:    "sigmoid bias changes selection not weights",
			r:       Router{Experts: 8, Used: 2, Gating: GatingSigmoid},
			bias:    []float32{0, 5, 0, 0, 0, 0, 0, 0},
			ids:     []int32{1, 2},
			weights: []float32{sig(-1), sig(2)},
		},
		{
			name:    "sigmoid normalised and scaled",
			r:       Router{Experts: 8, Used: 2, Gating: GatingSigmoid, NormWeights: true, Scale: 2.5},
			ids:     []int32{2, 4},
			weights: []float32{2.5 * sig(2) / (sig(2) + sig(1.5)), 2.5 * sig(1.5) / (sig(2) + sig(1.5))},
		},
		{
			name: "softmax",
			r:    Router{Experts: 8, Used: 1, Gating: GatingSoftmax},
			ids:  []int32{2},
			weights: func() []float32 {
				var s float64
				for _, l := range logits {
					s += math.Exp(float64(l - 2))
				}
				return []float32{float32(1 / s)}
			}(),
		},
		{
			name:    "softmax over selected",
			r:       Router{Experts: 8, Used: 2, Gating: GatingSoftmaxWeight},
			ids:     []int32{2, 4},
			weights: []float32{float32(1 / (1 + math.Exp(-0.5))), float32(math.Exp(-0.5) / (1 + math.Exp(-0.5)))},
		},
		{
			// groups of 2: {0.5,-1}=-0.5 {2,0.1}=2.1 {1.5,-0.3}=1.2 {0.9,0.2}=1.1; keep groups 1 and 2
			name:    "groups",
			r:       Router{Experts: 8, Used: 3, Gating: GatingSoftmaxWeight, Groups: 4, GroupsUsed: 2},
			ids:     []int32{2, 4, 3},
			weights: nil, // checked via ids only
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.r.Validate(); err != nil {
				t.Fatal(err)
			}
			ids := make([]int32, tc.r.Used)
			w := make([]float32, tc.r.Used)
			var s Scratch
			tc.r.Route(logits, tc.bias, ids, w, &s)
			if d := cmp.Diff(tc.ids, ids); d != "" {
				t.Errorf("ids (-want +got):\n%s", d)
			}
			if tc.weights != nil {
				if d := cmp.Diff(tc.weights, w, cmpopts.EquateApprox(0, 1e-6)); d != "" {
					t.Errorf("weights (-want +got):\n%s", d)
				}
			}
		})
	}
}

func TestValidate(t *testing.T) {
	bad := []Router{
		{Experts: 0, Used: 1, Gating: GatingSigmoid},
		{Experts: 4, Used: 5, Gating: GatingSigmoid},
		{Experts: 4, Used: 1, Gating: GatingNone},
		{Experts: 6, Used: 1, Gating: GatingSigmoid, Groups: 4, GroupsUsed: 1},
		{Experts: 8, Used: 1, Gating: GatingSigmoid, Groups: 4, GroupsUsed: 4},
		{Experts: 8, Used: 5, Gating: GatingSigmoid, Groups: 4, GroupsUsed: 2},
	}
	for i, r := range bad {
		if r.Validate() == nil {
			t.Errorf("case %d: %+v accepted", i, r)
		}
	}
}

func TestGroup(t *testing.T) {
	var b Batch
	b.Reset(3, 2)
	copy(b.IDs, []int32{4, 1, 1, 0, 4, 1})
	b.Group(5)
	if d := cmp.Diff([]int32{0, 1, 4}, b.Experts); d != "" {
		t.Errorf("experts: %s", d)
	}
	if d := cmp.Diff([]int{0, 1, 4, 6}, b.Start); d != "" {
		t.Errorf("start: %s", d)
	}
	if d := cmp.Diff([]int32{3, 1, 2, 5, 0, 4}, b.Rows); d != "" {
		t.Errorf("rows: %s", d)
	}
}

// TestBatchFront: the guessed experts the batch chose move to the front
// in the guess's order, each keeping its rows; a guessed expert nobody
// chose is skipped.
func TestBatchFront(t *testing.T) {
	var b Batch
	b.Reset(3, 2)
	copy(b.IDs, []int32{4, 1, 1, 0, 4, 1})
	b.Group(5)
	b.Front([]int32{4, 3, 1})
	if d := cmp.Diff([]int32{4, 1, 0}, b.Experts); d != "" {
		t.Errorf("experts: %s", d)
	}
	if d := cmp.Diff([]int{0, 2, 5, 6}, b.Start); d != "" {
		t.Errorf("start: %s", d)
	}
	if d := cmp.Diff([]int32{0, 4, 1, 2, 5, 3}, b.Rows); d != "" {
		t.Errorf("rows: %s", d)
	}
	for i, e := range b.Experts {
		for _, r := range b.Rows[b.Start[i]:b.Start[i+1]] {
			if b.IDs[r] != e {
				t.Errorf("row %d of expert %d chose %d", r, e, b.IDs[r])
			}
		}
	}
}

// plainRoute is build_moe_ffn's routing written out step by step, with
// explicit loops instead of Route's shared sorting: the reference the
// group-limited routing is checked against.
func plainRoute(r Router, logits, bias []float32) []int32 {
	n := r.Experts
	probs := make([]float32, n)
	switch r.Gating {
	case GatingSigmoid:
		for i, x := range logits {
			probs[i] = sigmoid(x)
		}
	default:
		softmax(probs, logits)
	}
	sel := make([]float32, n)
	for i := range sel {
		sel[i] = probs[i]
		if bias != nil {
			sel[i] += bias[i]
		}
	}
	if r.Groups > 1 {
		per := n / r.Groups
		score := make([]float32, r.Groups)
		for g := range score {
			best, second := float32(math.Inf(-1)), float32(math.Inf(-1))
			for _, v := range sel[g*per : (g+1)*per] {
				if v > best {
					best, second = v, best
				} else if v > second {
					second = v
				}
			}
			score[g] = best + second
		}
		kept := make([]bool, r.Groups)
		for range r.GroupsUsed {
			bi := -1
			for g, s := range score {
				if !kept[g] && (bi < 0 || s > score[bi]) {
					bi = g
				}
			}
			kept[bi] = true
		}
		for g, k := range kept {
			if !k {
				for i := g * per; i < (g+1)*per; i++ {
					sel[i] = float32(math.Inf(-1))
				}
			}
		}
	}
	ids := make([]int32, 0, r.Used)
	taken := make([]bool, n)
	for range r.Used {
		bi := -1
		for i, v := range sel {
			if !taken[i] && (bi < 0 || v > sel[bi]) {
				bi = i
			}
		}
		taken[bi] = true
		ids = append(ids, int32(bi))
	}
	return ids
}

// TestRouteGroupsReference checks group-limited routing (DeepSeek V3's 8
// groups of 32 with 4 used, and smaller shapes) against plainRoute on
// random logits, with and without the selection bias.
func TestRouteGroupsReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, r := range []Router{
		{Experts: 256, Used: 8, Gating: GatingSigmoid, Groups: 8, GroupsUsed: 4, NormWeights: true, Scale: 2.5},
		{Experts: 16, Used: 4, Gating: GatingSigmoid, Groups: 4, GroupsUsed: 2},
		{Experts: 64, Used: 6, Gating: GatingSoftmax, Groups: 8, GroupsUsed: 3},
	} {
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		var s Scratch
		for trial := range 200 {
			logits, bias := make([]float32, r.Experts), make([]float32, r.Experts)
			for i := range logits {
				logits[i], bias[i] = rng.Float32()*6-3, rng.Float32()*0.2-0.1
			}
			for _, b := range [][]float32{nil, bias} {
				ids, w := make([]int32, r.Used), make([]float32, r.Used)
				r.Route(logits, b, ids, w, &s)
				if want := plainRoute(r, logits, b); !cmp.Equal(want, ids) {
					t.Fatalf("%+v trial %d bias=%v: ids %v, want %v", r, trial, b != nil, ids, want)
				}
			}
		}
	}
}
