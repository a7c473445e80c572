package stagingmmap

import (
	"context"
	"fmt"
	"testing"

	"github.com/k3-inference/k3/core/plugin"
)

// TestHintStale queues hints as a model makes them over two passes and
// checks which the prefetcher would still read when it gets to them: not
// guesses for a layer whose current hint came, nor guesses a later guess
// replaced, nor anything of a layer or pass the model is past.
func TestHintStale(t *testing.T) {
	s := &Stager{experts: map[int]int{1: 8, 2: 8, 3: 8}, current: make(chan hint, 64), spec: make(chan hint, 64),
		guessed: map[int]hintPos{}}
	var queued []hint
	hintAt := func(layer int, spec bool, experts ...int) string {
		t.Helper()
		if err := s.Hint(context.Background(), &plugin.HintRequest{Layer: layer, Experts: experts, Speculative: spec}); err != nil {
			t.Fatal(err)
		}
		q := s.current
		if spec {
			q = s.spec
		}
		queued = append(queued, <-q)
		return name(queued[len(queued)-1])
	}
	// Pass 1: layer 1 (guessed before it), then guesses for 2 (twice,
	// depth 2) and 3.
	hintAt(1, true, 0, 1)
	hintAt(1, false, 1, 2)
	hintAt(2, true, 3)
	hintAt(3, true, 4)
	hintAt(2, true, 5)
	hintAt(2, false, 5, 6)
	hintAt(3, true, 7)
	// Pass 2 starts at layer 1: everything of pass 1 is stale.
	hintAt(1, false, 0)
	hintAt(2, true, 1)

	var live []string
	for _, h := range queued {
		if !s.stale(h) {
			live = append(live, name(h))
		}
	}
	if got, want := fmt.Sprint(live), "[L1 ?2]"; got != want {
		t.Errorf("hints still to read after both passes: %v, want %v", got, want)
	}
	// Within pass 1, right after layer 2's current hint: layer 3's first
	// guess is replaced by its second only once that comes.
	s2 := &Stager{experts: s.experts, current: make(chan hint, 64), spec: make(chan hint, 64), guessed: map[int]hintPos{}}
	s, queued = s2, nil
	hintAt(3, true, 4)
	hintAt(2, false, 5)
	if s.stale(queued[0]) || s.stale(queued[1]) {
		t.Errorf("a guess for a later layer or the current hint was dropped")
	}
	hintAt(3, true, 7)
	if !s.stale(queued[0]) || s.stale(queued[2]) {
		t.Errorf("layer 3's first guess should give way to its second")
	}
}

func name(h hint) string {
	if h.Speculative {
		return fmt.Sprint("?", h.Layer)
	}
	return fmt.Sprint("L", h.Layer)
}
