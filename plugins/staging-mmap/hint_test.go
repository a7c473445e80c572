package stagingmmap

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/cache"
	"github.com/k3-inference/k3/core/plugin/plugintest"
)

func key(l, e int32) cache.Key { return cache.Key{Layer: l, Expert: e} }

// readLog records the units the workers read and holds the first read
// until release is closed.
type readLog struct {
	mu      sync.Mutex
	order   []cache.Key
	blocked chan struct{}
	release chan struct{}
}

func logReads(t *testing.T) *readLog {
	r := &readLog{blocked: make(chan struct{}), release: make(chan struct{})}
	orig := beforeRead
	t.Cleanup(func() { beforeRead = orig })
	held := false
	beforeRead = func(k cache.Key) {
		r.mu.Lock()
		r.order = append(r.order, k)
		first := !held
		held = true
		r.mu.Unlock()
		if first {
			close(r.blocked)
			<-r.release
		}
	}
	return r
}

// reads waits until the stager has nothing left to read and returns the
// units read, in order.
func (r *readLog) reads(s *Stager) []cache.Key {
	for idle := false; !idle; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		idle = s.inflight == 0 && s.queue.Len() == 0
		s.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order)
}

// TestHintReads holds the only worker inside a guess's read, hints as a
// model does over two tokens and checks what is then read, in order: the
// current hint before guesses; not the guesses for a layer its router did
// not choose, nor a guess a later guess replaced, nor a layer the model
// is past; nothing of the first token once the second starts; and an
// Acquire of a unit a worker is reading waits for that read rather than
// reading it again.
func TestHintReads(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 16)
	s := New()
	if _, err := s.Open(ctx, m.Request(budget, t.TempDir(), map[string]string{"io_workers": "1"})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx) })
	r := logReads(t)
	hint := func(l int, e []int, spec bool) {
		t.Helper()
		if err := s.Hint(ctx, &plugin.HintRequest{Layer: l, Experts: e, Speculative: spec}); err != nil {
			t.Fatal(err)
		}
	}
	hint(0, []int{7}, true)
	<-r.blocked // the worker is inside L0/E7's read
	// An Acquire of L0/E7 now waits for that read.
	acquired := make(chan error)
	go func() {
		_, err := s.Acquire(ctx, &plugin.AcquireRequest{Step: 1, Slices: []plugin.Slice{{Tensor: m.Routed(0)[0], Expert: 7}}})
		acquired <- err
	}()
	hint(0, []int{1, 2}, true)
	hint(0, []int{3}, false)
	hint(1, []int{0, 1, 3}, true)
	hint(2, []int{6}, true)
	hint(1, []int{0, 1, 2}, true) // replaces L1's guess: E3 goes
	hint(2, []int{4}, true)       // and L2's: E6 goes
	// Layer 1 chose 2 and 5: layer 0's hints are past, L1's guesses 0 and
	// 1 wrong, L2's guess still to come.
	hint(1, []int{2, 5}, false)
	select {
	case err := <-acquired:
		t.Fatalf("Acquire returned (%v) while the read it needs was held", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(r.release)
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}
	want := []cache.Key{key(0, 7), key(1, 2), key(1, 5), key(2, 4)}
	if diff := cmp.Diff(want, r.reads(s)); diff != "" {
		t.Errorf("reads (-want +got):\n%s", diff)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if max := s.resBytes + 4*s.unitSize; st.BytesRead > max {
		t.Errorf("read %d bytes: more than the always-needed %d and 4 units of at most %d", st.BytesRead, s.resBytes, s.unitSize)
	}
	// The next token: its first current hint drops what is left of the
	// last one's hints (a guess for layer 3 made before).
	r.mu.Lock()
	r.order = nil
	r.mu.Unlock()
	s.mu.Lock() // hold the worker off while both hints are queued
	s.queue.Hint(3, []int{0}, true, func(cache.Key) bool { return false })
	s.queue.Hint(0, []int{4}, false, func(cache.Key) bool { return false })
	s.work.Broadcast()
	s.mu.Unlock()
	if diff := cmp.Diff([]cache.Key{key(0, 4)}, r.reads(s)); diff != "" {
		t.Errorf("next token's reads (-want +got):\n%s", diff)
	}
}

func TestHolds(t *testing.T) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 4)
	s := New()
	plugintest.CheckHolds(t, s, m, budget, map[string]string{"io_workers": "2"}, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inflight == 0 && s.queue.Len() == 0
	})
}

func TestPartialAcquire(t *testing.T) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 4)
	s := New()
	plugintest.CheckPartial(t, s, m, budget, map[string]string{"io_workers": "2"}, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inflight == 0 && s.queue.Len() == 0
	})
}
