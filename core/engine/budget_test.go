package engine

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/config"
)

// TestBudgetMessages: each way a budget falls short is named as it is,
// with the numbers the verdict rests on: the budget, the always-needed
// bytes, one expert unit, the sequence state and the least budget that
// runs.
func TestBudgetMessages(t *testing.T) {
	const mib = 1 << 20
	tiny := Budget{State: 411648, Context: 1024, Resident: 1548288, Unit: 69632}
	for _, tc := range []struct {
		name  string
		b     Budget
		words []string // none: it fits
	}{
		{"fits", tiny.withTotal(4 * mib), nil},
		{"fits exactly", tiny.withTotal(tiny.MinTotal()), nil},
		{"state leaves nothing", Budget{State: 3 * mib, Context: 100000, Resident: 1548288, Unit: 69632}.withTotal(4 * mib),
			[]string{"4.0MiB (4194304 bytes)", "sequence state (3.0MiB at context 100000)", "leave nothing for the weights"}},
		{"below always-needed", tiny.withTotal(3 * mib),
			[]string{"3.0MiB (3145728 bytes)", "the 1.1MiB (1161216 bytes) left for the weights is below the always-needed 1548288 bytes"}},
		// The case of issue 23: a budget under a 1 GiB cgroup whose stager
		// part could not hold the always-needed bytes was said to hold them.
		{"issue 23 cgroup", Budget{Stager: 361660416, Resident: 2268905472, Unit: 12 * mib},
			[]string{"stager budget 344.9MiB (361660416 bytes) is below the always-needed 2268905472 bytes"}},
		{"not one unit", tiny.withTotal(tiny.MinTotal() - 1),
			[]string{"holds the always-needed 1548288 bytes but not one 69632-byte expert unit"}},
		{"not one unit, stager part", Budget{Stager: 1548288 + 69631, Resident: 1548288, Unit: 69632},
			[]string{"stager budget 1.5MiB (1617919 bytes)", "holds the always-needed 1548288 bytes but not one 69632-byte expert unit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.b.Check()
			if tc.words == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var be *BudgetError
			if !errors.As(err, &be) {
				t.Fatalf("err = %v, want a BudgetError", err)
			}
			msg := err.Error()
			words := tc.words
			if tc.b.Total > 0 {
				// The breakdown of what it needs.
				words = append(words, "needs at least", strconv.FormatInt(tc.b.MinTotal(), 10)+" bytes",
					"always-needed "+config.Size(tc.b.Resident).String(), "one "+strconv.FormatInt(tc.b.Unit, 10)+"-byte expert unit",
					"sequence state "+config.Size(tc.b.State).String())
			}
			for _, w := range words {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q:\n%s", w, msg)
				}
			}
			if tc.b.Stager < tc.b.Resident && strings.Contains(msg, "holds the always-needed") {
				t.Errorf("a part below the always-needed bytes is said to hold them:\n%s", msg)
			}
		})
	}
}

// TestBudgetMinTotal: MinTotal is the boundary, in every regime of the
// core's headroom (half the budget, 128 MiB, a tenth, 4 GiB): it runs, a
// byte less does not.
func TestBudgetMinTotal(t *testing.T) {
	for _, b := range []Budget{
		{State: 411648, Resident: 1548288, Unit: 69632},
		{State: 0, Resident: 100 << 20, Unit: 1 << 20},
		{State: 50 << 20, Resident: 700 << 20, Unit: 12 << 20},
		{State: 2 << 30, Resident: 25 << 30, Unit: 12 << 20},
		{State: 1 << 30, Resident: 4 << 30, Unit: 0},
	} {
		m := b.MinTotal()
		if err := b.withTotal(m).Check(); err != nil {
			t.Errorf("%+v: MinTotal %d refused: %v", b, m, err)
		}
		if err := b.withTotal(m - 1).Check(); err == nil {
			t.Errorf("%+v: MinTotal-1 %d accepted", b, m-1)
		}
	}
}

// TestBudgetGroup: a step pins the experts of one group, which fits in
// what the stager's part holds beside the always-needed bytes, at most
// the experts a step can choose.
func TestBudgetGroup(t *testing.T) {
	b := Budget{Stager: 1000 + 8*100, Resident: 1000, Unit: 100}
	if g := b.Group(); g != 6 || b.StepPin() != 600 {
		t.Errorf("group %d (pin %d), want 6 (three quarters of 8 units)", g, b.StepPin())
	}
	b.StepExperts = 4
	if g := b.Group(); g != 4 {
		t.Errorf("group %d, want the 4 a step can choose", g)
	}
	b = Budget{Stager: 1000 + 199, Resident: 1000, Unit: 100}
	if g := b.Group(); g != 1 || int64(g)*b.Unit > b.Stager-b.Resident {
		t.Errorf("group %d with room for one unit", g)
	}
}

// TestBudgetChunk: with a memory budget and the model's working memory per
// token, the prefill chunk is the most tokens whose activations fit in three
// quarters of the room beside the always-needed bytes (never past the context, never
// taking the last expert unit), and the stager's part shrinks by exactly
// what the chunk reserves; a fixed ubatch or no room keeps the old split.
func TestBudgetChunk(t *testing.T) {
	const mib = 1 << 20
	base := Budget{State: 10 * mib, Context: 100000, Resident: 300 * mib, Unit: 12 * mib}
	plain := base.withTotal(1000 * mib)
	room := plain.Stager - plain.Resident
	b := plain.withChunk(64*mib, 1*mib)
	if want := int((room*3/4 - 64*mib) / mib); b.Chunk != want {
		t.Errorf("chunk %d, want %d", b.Chunk, want)
	}
	if b.Activations != 64*mib+int64(b.Chunk)*mib || b.Stager != plain.Stager-b.Activations {
		t.Errorf("activations %d, stager %d (was %d)", b.Activations, b.Stager, plain.Stager)
	}
	if err := b.Check(); err != nil {
		t.Error(err)
	}
	short := base
	short.Context = 100
	if c := short.withTotal(1000*mib).withChunk(64*mib, 1*mib).Chunk; c != 100 {
		t.Errorf("chunk %d past a context of 100", c)
	}
	// Room for one and a half units: the chunk may not take the last one.
	tight := base.withTotal(base.MinTotal() + 6*mib)
	if c := tight.withChunk(0, 1*mib); c.Check() != nil || c.Chunk > 6 {
		t.Errorf("tight budget: chunk %d, %v", c.Chunk, c.Check())
	}
	if c := base.withTotal(base.MinTotal()).withChunk(64*mib, 1*mib); c.Chunk != 0 || c.Activations != 0 {
		t.Errorf("no room: chunk %d, activations %d", c.Chunk, c.Activations)
	}
}
