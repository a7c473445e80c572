package readq

import (
	"fmt"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/plugin/cache"
)

func none(cache.Key) bool { return false }

// drain pops every job and names it: D (demand), L (current) or ?
// (guess), then layer.expert.
func drain(q *Queue) string {
	var out []string
	for {
		j, p, ok := q.Pop()
		if !ok {
			return strings.Join(out, " ")
		}
		out = append(out, fmt.Sprintf("%s%d.%d", "DL?"[p:p+1], j.Key.Layer, j.Key.Expert))
	}
}

// TestOrder: demand before current hints before guesses, each in arrival
// order; a key hinted again at the same or a lower urgency is not queued
// twice; cached keys are not queued.
func TestOrder(t *testing.T) {
	q := New()
	q.Hint(2, []int{5, 6}, true, none)
	q.Hint(1, []int{1, 2, 2}, false, func(k cache.Key) bool { return k.Expert == 2 })
	q.Hint(2, []int{5, 6}, true, none)
	q.Demand(Job{Key: cache.Key{Layer: 1, Expert: 3}, Entry: &cache.Entry{}})
	if q.Len() != 4 || q.LenPrio(Speculative) != 2 {
		t.Fatalf("len %d, guesses %d", q.Len(), q.LenPrio(Speculative))
	}
	if !q.Queued(cache.Key{Layer: 2, Expert: 6}) || q.Queued(cache.Key{Layer: 1, Expert: 2}) {
		t.Error("Queued wrong")
	}
	if got, want := drain(q), "D1.3 L1.1 ?2.5 ?2.6"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	if q.Len() != 0 || len(q.queued) != 0 {
		t.Errorf("after draining: len %d, %d keys marked queued", q.Len(), len(q.queued))
	}
}

// TestPromote: a guess the model then chooses is read at the current
// hint's urgency, once: the guess's copy no longer counts as queued.
func TestPromote(t *testing.T) {
	q := New()
	q.Hint(3, []int{7}, true, none)
	q.Hint(3, []int{7}, false, none)
	if got, want := drain(q), "L3.7 ?3.7"; got != want {
		t.Errorf("order %q, want %q", got, want)
	}
	// The caller skips the second copy because its cache has the key by
	// then; the queue must not still mark it.
	if len(q.queued) != 0 {
		t.Errorf("%d keys still marked queued", len(q.queued))
	}
}

// TestDropStale follows a model's hints over two tokens: a current hint
// drops the guesses for its layer it did not choose and everything for
// earlier layers; a new guess for a layer replaces the old; guesses for
// later layers and demand reads stay; the next token's first current hint
// drops every hint left of the last.
func TestDropStale(t *testing.T) {
	q := New()
	q.Hint(1, []int{0, 1}, true, none)  // guess layer 1
	q.Hint(1, []int{1, 2}, false, none) // layer 1 routed: ?1.0 dropped
	q.Hint(2, []int{3}, true, none)
	q.Hint(3, []int{4}, true, none)
	q.Hint(2, []int{5}, true, none) // fresher guess for 2: ?2.3 dropped
	q.Demand(Job{Key: cache.Key{Layer: 1, Expert: 9}, Entry: &cache.Entry{}})
	if got, want := snapshot(q), "D1.9 L1.1 L1.2 ?1.1 ?3.4 ?2.5"; got != want {
		t.Fatalf("after guesses: %q, want %q", got, want)
	}
	q.Hint(2, []int{5, 6}, false, none) // layer 2 routed: layer 1 hints and ?1.1 go
	if got, want := snapshot(q), "D1.9 L2.5 L2.6 ?3.4 ?2.5"; got != want {
		t.Fatalf("after layer 2: %q, want %q", got, want)
	}
	q.Hint(3, []int{7}, true, none)  // replaces ?3.4
	q.Hint(1, []int{0}, false, none) // next token: every hint of the last goes
	if got, want := drain(q), "D1.9 L1.0"; got != want {
		t.Errorf("next token: %q, want %q", got, want)
	}
	if len(q.queued) != 0 {
		t.Errorf("%d keys still marked queued", len(q.queued))
	}
}

// snapshot names the waiting jobs in order without taking them.
func snapshot(q *Queue) string {
	c := &Queue{queued: map[cache.Key]Prio{}}
	for p := range q.q {
		c.q[p] = append([]Job(nil), q.q[p]...)
	}
	for k, v := range q.queued {
		c.queued[k] = v
	}
	return drain(c)
}
