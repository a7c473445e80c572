package moe

import (
	"fmt"

	"github.com/k3-inference/k3/core/ops"
	"math"
	"sort"
)

// Gating is how router logits become expert probabilities. The values are
// llama.cpp's llama_expert_gating_func_type, as stored under
// <arch>.expert_gating_func.
type Gating int

const (
	GatingNone          Gating = 0
	GatingSoftmax       Gating = 1
	GatingSigmoid       Gating = 2
	GatingSoftmaxWeight Gating = 3 // softmax over the selected experts' logits
	GatingSqrtSoftplus  Gating = 4
)

func (g Gating) String() string {
	switch g {
	case GatingSoftmax:
		return "softmax"
	case GatingSigmoid:
		return "sigmoid"
	case GatingSoftmaxWeight:
		return "softmax_weight"
	case GatingSqrtSoftplus:
		return "sqrt_softplus"
	}
	return fmt.Sprintf("gating(%d)", int(g))
}

// Router is the routing configuration of one MoE layer, following
// llama.cpp's build_moe_ffn: gate the logits, add the selection bias
// (selection only), optionally keep only the best expert groups, take the
// top k, then normalise and scale the weights of the chosen experts.
type Router struct {
	Experts     int     // n_expert
	Used        int     // n_expert_used (k)
	Gating      Gating  // expert_gating_func
	NormWeights bool    // expert_weights_norm
	Scale       float32 // expert_weights_scale; 0 or 1 means none
	Groups      int     // expert_group_count; <= 1 means no groups
	GroupsUsed  int     // expert_group_used_count
}

// Validate reports a configuration llama.cpp would reject.
func (r *Router) Validate() error {
	switch {
	case r.Experts <= 0:
		return fmt.Errorf("moe: expert count %d", r.Experts)
	case r.Used <= 0 || r.Used > r.Experts:
		return fmt.Errorf("moe: %d experts used of %d", r.Used, r.Experts)
	}
	switch r.Gating {
	case GatingSoftmax, GatingSigmoid, GatingSoftmaxWeight, GatingSqrtSoftplus:
	default:
		return fmt.Errorf("moe: unsupported gating function %d", int(r.Gating))
	}
	if r.Groups > 1 {
		if r.Experts%r.Groups != 0 {
			return fmt.Errorf("moe: %d experts do not split into %d groups", r.Experts, r.Groups)
		}
		if r.GroupsUsed <= 0 || r.GroupsUsed >= r.Groups {
			return fmt.Errorf("moe: %d groups used of %d", r.GroupsUsed, r.Groups)
		}
		if r.GroupsUsed*(r.Experts/r.Groups) < r.Used {
			return fmt.Errorf("moe: %d groups of %d experts cannot supply %d experts", r.GroupsUsed, r.Experts/r.Groups, r.Used)
		}
	}
	return nil
}

// Scratch holds one token's routing buffers so that routing allocates
// nothing per token. The zero value is ready to use.
type Scratch struct {
	probs, sel []float32
	order      []int32
	groupScore []float32
	groupOrder []int32
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// Route picks r.Used experts for one token from its router logits and
// writes their ids (best first, as ggml's descending argsort orders them)
// and weights into ids and weights (each of length r.Used). bias, if not
// nil, is exp_probs_b: it shifts the selection but not the weights.
func (r *Router) Route(logits, bias []float32, ids []int32, weights []float32, s *Scratch) {
	n := r.Experts
	s.probs = grow(s.probs, n)
	probs := s.probs
	switch r.Gating {
	case GatingSoftmax:
		softmax(probs, logits[:n])
	case GatingSigmoid:
		for i, x := range logits[:n] {
			probs[i] = sigmoid(x)
		}
	case GatingSoftmaxWeight:
		copy(probs, logits[:n])
	case GatingSqrtSoftplus:
		for i, x := range logits[:n] {
			probs[i] = float32(math.Sqrt(float64(softplus(x))))
		}
	}

	sel := probs
	if bias != nil {
		s.sel = grow(s.sel, n)
		sel = s.sel
		for i := range sel {
			sel[i] = probs[i] + bias[i]
		}
	}
	if r.Groups > 1 {
		if bias == nil {
			s.sel = grow(s.sel, n)
			copy(s.sel, probs)
			sel = s.sel
		}
		r.maskGroups(sel, s)
	}

	s.order = grow(s.order, n)
	topK(sel, s.order)
	copy(ids, s.order[:r.Used])
	for i, id := range ids {
		weights[i] = probs[id]
	}

	if r.Gating == GatingSoftmaxWeight {
		softmax(weights, weights)
	}
	if r.NormWeights {
		// ggml_sum_rows adds in float64; the sum is then clamped to the
		// smallest normal F16 before dividing.
		var s64 float64
		for _, w := range weights {
			s64 += float64(w)
		}
		sum := max(float32(s64), 6.103515625e-5)
		for i := range weights {
			weights[i] /= sum
		}
	}
	if r.Scale != 0 && r.Scale != 1 {
		for i := range weights {
			weights[i] *= r.Scale
		}
	}
}

// maskGroups scores each group by the sum of its two best selection values
// and sets the selection values of all but the best GroupsUsed groups to -Inf.
func (r *Router) maskGroups(sel []float32, s *Scratch) {
	per := r.Experts / r.Groups
	s.groupScore = grow(s.groupScore, r.Groups)
	s.order = grow(s.order, per)
	for g := 0; g < r.Groups; g++ {
		grp := sel[g*per : (g+1)*per]
		topK(grp, s.order[:per])
		var sc float32
		for _, id := range s.order[:min(2, per)] {
			sc += grp[id]
		}
		s.groupScore[g] = sc
	}
	s.groupOrder = grow(s.groupOrder, r.Groups)
	topK(s.groupScore, s.groupOrder)
	keep := s.groupOrder[:r.GroupsUsed]
	for g := 0; g < r.Groups; g++ {
		kept := false
		for _, k := range keep {
			if int(k) == g {
				kept = true
				break
			}
		}
		if !kept {
			for i := g * per; i < (g+1)*per; i++ {
				sel[i] = float32(math.Inf(-1))
			}
		}
	}
}

// topK fills order with the indices of vals sorted by descending value.
// Ties keep index order (ggml's std::sort leaves them unspecified).
func topK(vals []float32, order []int32) {
	for i := range order {
		order[i] = int32(i)
	}
	sort.SliceStable(order, func(a, b int) bool { return vals[order[a]] > vals[order[b]] })
}

func sigmoid(x float32) float32  { return ops.Sigmoid(x) }
func softplus(x float32) float32 { return ops.Softplus(x) }

func softmax(dst, src []float32) { ops.Softmax(dst, src) }
