package engine

import (
	"fmt"
	"os"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/plugin"
)

// Footprint is the budget a stager needs to keep a model's always-needed
// tensors and units expert units resident (a unit: one expert of a layer,
// its slice of every routed tensor of the layer), in the stager's own
// layout, alignment included. The built-in stagers export theirs
// (stagingpread.Footprint, stagingmmap.Footprint). The start-up check and
// the grouping of a step's experts (Staged.MaxExperts) both size through
// it, so neither can promise what the stager will not hold.
type Footprint func(req *plugin.OpenRequest, units int) (int64, error)

// PageFootprint is the footprint of a stager that keeps each tensor and
// each expert slice in whole pages, with one page more for a range that
// starts inside a page: a bound for the built-in stagers' layouts, used for
// a stager that does not say its own.
func PageFootprint(req *plugin.OpenRequest, units int) (int64, error) {
	page := int64(os.Getpagesize())
	up := func(n int64) int64 { return (n + page - 1) / page * page }
	var resident, largest int64
	unit := map[int]int64{}
	for _, t := range req.Tensors {
		if err := t.Validate(len(req.Shards)); err != nil {
			return 0, err
		}
		if t.Routed() {
			unit[t.Layer] += up(t.ExpertSize) + page
		} else {
			resident += up(t.Size) + page
		}
	}
	for _, n := range unit {
		largest = max(largest, n)
	}
	return resident + int64(units)*largest, nil
}

// Headroom is the part of a memory budget the core keeps for activations,
// the Go heap and the plugin processes, beyond the sequence state: a tenth
// of the budget within [128 MiB, 4 GiB], and never more than half.
func Headroom(total int64) int64 {
	return min(max(total/10, 128<<20), 4<<30, total/2)
}

// Budget is how a memory budget divides between the core and the stager,
// and what one step of the model pins of the stager's part.
type Budget struct {
	// Total is the memory budget; 0 when the stager's part was given
	// directly (StageOptions.Budget).
	Total int64
	// Headroom (Headroom(Total)) and State (the sequence state at Context
	// tokens) are the core's part.
	Headroom, State int64
	Context         int
	// Stager is what the stager may keep resident: Total less the core's
	// part.
	Stager int64
	// Resident is the always-needed bytes and Unit one expert unit (of the
	// largest layer), both as the stager lays them out.
	Resident, Unit int64
	// StepExperts is the most experts one layer of the largest forward
	// call can choose (0: unknown).
	StepExperts int
	// Chunk is the most prompt tokens one forward call runs (the prefill
	// chunk), and Activations the core's working memory reserved for a
	// call of that many tokens (0: none reserved; Headroom covers it).
	// Sized from the budget (PrefillChunk) unless StageOptions.UBatch
	// fixes the chunk, so that a long prompt reads each layer's experts
	// once per chunk in as few chunks as the budget allows.
	Chunk       int
	Activations int64
	// ActivationsPerToken is the part of Activations that grows with the
	// chunk, per token (the rest is fixed), for the mode line.
	ActivationsPerToken int64
}

// withTotal is b for a memory budget of total bytes: the core keeps
// Headroom(total) and State, the stager gets the rest.
func (b Budget) withTotal(total int64) Budget {
	b.Total, b.Headroom = total, Headroom(total)
	b.Stager = total - b.Headroom - b.State - b.Activations
	return b
}

// groupSize is how many experts one acquire asks for when room bytes are
// left after the always-needed ones: three quarters of the room, so the
// next group's reads (hinted while this one computes) fit beside it, and
// at least one.
func groupSize(room, unit int64) int {
	if unit <= 0 {
		return 1
	}
	return max(1, int(room*3/4/unit))
}

// Group is how many experts the largest step pins at once: a step whose
// experts do not fit together runs in groups of this many.
func (b Budget) Group() int {
	g := groupSize(b.Stager-b.Resident, b.Unit)
	if b.StepExperts > 0 {
		g = min(g, b.StepExperts)
	}
	return g
}

// StepPin is the expert bytes the largest step pins at once.
func (b Budget) StepPin() int64 { return int64(b.Group()) * b.Unit }

// fits reports whether the stager's part holds the always-needed bytes and
// one expert unit: a step then runs, its experts in groups that fit.
func (b Budget) fits() bool {
	return b.Stager > 0 && b.Stager-b.Resident >= b.Unit
}

// MinTotal is the smallest memory budget that runs one step: its stager
// part (what Headroom and State leave) holds the always-needed bytes and
// one expert unit.
func (b Budget) MinTotal() int64 {
	need := b.Resident + b.Unit + b.State
	// total - Headroom(total) does not decrease as total grows, and is at
	// least total/2.
	lo, hi := need, 2*need+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if b.withTotal(mid).fits() {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// Check returns a *BudgetError when the budget cannot run one step.
func (b Budget) Check() error {
	if b.fits() {
		return nil
	}
	return &BudgetError{Budget: b}
}

// BudgetError is a memory budget too small to run one step of the model.
// Its message says which part falls short and every number the verdict
// rests on.
type BudgetError struct{ Budget }

func (e *BudgetError) Error() string {
	b := e.Budget
	if b.Total == 0 {
		return e.reason(fmt.Sprintf("stager budget %s (%d bytes)", config.Size(b.Stager), b.Stager))
	}
	return fmt.Sprintf("memory budget %s (%d bytes) cannot run one step of the model: %s; "+
		"it needs at least %s (%d bytes): always-needed %s + one step's experts %s (at least one %d-byte expert unit; a step with more experts runs them in groups that fit) + sequence state %s at context %d + %s for activations and the Go heap",
		config.Size(b.Total), b.Total, e.reason(fmt.Sprintf("the %s (%d bytes) left for the weights", config.Size(b.Stager), b.Stager)),
		config.Size(b.MinTotal()), b.MinTotal(), config.Size(b.Resident), config.Size(b.Unit), b.Unit, config.Size(b.State), b.Context, config.Size(Headroom(b.MinTotal())))
}

// reason says which part falls short; left names the stager's part.
func (e *BudgetError) reason(left string) string {
	b := e.Budget
	switch {
	case b.Stager <= 0:
		return fmt.Sprintf("the sequence state (%s at context %d) and %s for activations and the Go heap leave nothing for the weights (lower the context or raise the budget)", config.Size(b.State), b.Context, config.Size(b.Headroom))
	case b.Stager < b.Resident:
		return fmt.Sprintf("%s is below the always-needed %d bytes", left, b.Resident)
	default:
		return fmt.Sprintf("%s holds the always-needed %d bytes but not one %d-byte expert unit beside them", left, b.Resident, b.Unit)
	}
}

// PlanBudget is how o's memory budget divides for f's model (what
// OpenStaged checks), sizing the stager's part with o's footprint
// (PageFootprint when it has none). Without a budget the stager gets room
// for every expert.
func PlanBudget(f *gguf.File, o StageOptions) (Budget, error) {
	req, err := o.openRequest(f)
	if err != nil {
		return Budget{}, err
	}
	return planBudget(f, req, o)
}

func planBudget(f *gguf.File, req *plugin.OpenRequest, o StageOptions) (Budget, error) {
	foot := o.Footprint
	if foot == nil {
		foot = PageFootprint
	}
	resident, err := foot(req, 0)
	if err != nil {
		return Budget{}, err
	}
	one, err := foot(req, 1)
	if err != nil {
		return Budget{}, err
	}
	b := Budget{State: o.State, Context: o.Context, Resident: resident, Unit: one - resident, Chunk: o.UBatch}
	switch {
	case o.Memory > 0:
		b = b.withTotal(o.Memory)
		if o.UBatch <= 0 {
			b = b.withChunk(o.ActivationsFixed, o.ActivationsPerToken)
		}
	case o.Budget > 0:
		b.Stager = o.Budget
	default:
		units := 0
		for _, t := range req.Tensors {
			units = max(units, (t.Layer+1)*t.Experts)
		}
		if b.Stager, err = foot(req, units); err != nil {
			return Budget{}, err
		}
	}
	if b.Chunk <= 0 {
		b.Chunk = DefaultUBatch
	}
	b.StepExperts = stepExperts(f, req, b.Chunk)
	return b, nil
}

// PrefillChunk is the most prompt tokens one forward call may run in
// spare bytes when a call of n tokens works in fixed + n*perToken bytes,
// at most context; 0 when not even one token fits.
func PrefillChunk(spare, fixed, perToken int64, context int) int {
	if perToken <= 0 || spare <= fixed {
		return 0
	}
	n := (spare - fixed) / perToken
	if context > 0 {
		n = min(n, int64(context))
	}
	return int(n)
}

// withChunk sizes the prefill chunk (PrefillChunk) and reserves its
// activations out of the stager's part. They take at most three quarters
// of the room beside the always-needed bytes, and never the last expert
// unit: the stager keeps the rest for experts (its cache for decoding, and
// groups large enough to overlap reads with compute). A quarter, not a
// half: a chunk that covers a prompt saves a whole read of the experts
// per chunk it spares, while a cache of a few percent of the experts
// saves about as few percent of a decode step's reads. A prompt's chunks each read
// every expert they choose once per layer, so the chunk, not the cache,
// is what bounds the bytes a long prompt reads. Without room for one
// token the chunk stays the default and Headroom covers it.
func (b Budget) withChunk(fixed, perToken int64) Budget {
	room := b.Stager - b.Resident
	n := PrefillChunk(min(room*3/4, room-b.Unit), fixed, perToken, b.Context)
	if n <= 0 {
		b.Chunk = 0
		return b
	}
	b.Chunk, b.Activations, b.ActivationsPerToken = n, fixed+int64(n)*perToken, perToken
	return b.withTotal(b.Total)
}

// stepExperts is the most experts one layer of a forward call of ubatch
// tokens can choose: ubatch times the experts a token uses, at most the
// layer's experts (0 when the model does not say how many a token uses).
func stepExperts(f *gguf.File, req *plugin.OpenRequest, ubatch int) int {
	if ubatch <= 0 {
		ubatch = DefaultUBatch
	}
	experts := 0
	for _, t := range req.Tensors {
		experts = max(experts, t.Experts)
	}
	v, ok := f.Lookup(f.Arch() + ".expert_used_count")
	if !ok {
		return 0
	}
	xs, err := v.AsInts() // one count, or one a layer
	used := int64(0)
	for _, x := range xs {
		used = max(used, x)
	}
	if err != nil || used <= 0 {
		return 0
	}
	return int(min(int64(ubatch)*used, int64(experts)))
}
