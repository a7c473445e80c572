package stagingpread

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/cache"
	"github.com/k3-inference/k3/core/plugin/plugintest"
	"github.com/k3-inference/k3/core/plugin/readq"
)

// readRecorder makes the stager's reads note which unit they read and
// holds the first one until release is closed.
type readRecorder struct {
	mu      sync.Mutex
	order   []cache.Key
	blocked chan struct{} // closed when the first read is held
	release chan struct{}
}

func recordReads(t *testing.T, s *Stager, m *plugintest.Model) *readRecorder {
	// Which unit each file range belongs to (its first part's offset).
	unitAt := map[[2]int64]cache.Key{}
	for l := 0; l < m.Layers; l++ {
		for e := 0; e < m.Experts; e++ {
			p := s.lay.unitParts(s.req, l, e, 0)[0]
			unitAt[[2]int64{int64(p.shard), p.fileOff}] = cache.Key{Layer: int32(l), Expert: int32(e)}
		}
	}
	r := &readRecorder{blocked: make(chan struct{}), release: make(chan struct{})}
	orig := pread
	t.Cleanup(func() { pread = orig })
	first := true
	pread = func(f *os.File, p []byte, off int64) (int, error) {
		for i, name := range m.Req.Shards {
			if k, ok := unitAt[[2]int64{int64(i), off}]; ok && sameFile(f.Name(), name) {
				r.mu.Lock()
				r.order = append(r.order, k)
				wait := first
				first = false
				r.mu.Unlock()
				if wait {
					close(r.blocked)
					<-r.release
				}
			}
		}
		return orig(f, p, off)
	}
	return r
}

// reads waits until the stager has nothing left to read and returns the
// units it read, in order.
func (r *readRecorder) reads(s *Stager) []cache.Key {
	for idle := false; !idle; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		idle = s.inflight == 0 && s.queueLen() == 0
		s.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order)
}

func openOneWorker(t *testing.T) (*Stager, *plugintest.Model) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 16)
	s := New()
	if _, err := s.Open(context.Background(), m.Request(budget, t.TempDir(), map[string]string{"io_workers": "1"})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, m
}

func key(l, e int32) cache.Key { return cache.Key{Layer: l, Expert: e} }

// TestReadOrder holds the only I/O worker inside a speculative read, queues
// speculative, current and demand work behind it, and checks the order the
// reads then run in: demand, current hints, speculative hints.
func TestReadOrder(t *testing.T) {
	ctx := context.Background()
	s, m := openOneWorker(t)
	r := recordReads(t, s, m)

	s.Hint(ctx, &plugin.HintRequest{Layer: 1, Experts: []int{0, 1, 2}, Speculative: true})
	<-r.blocked // the worker is inside L1/E0's read
	s.Hint(ctx, &plugin.HintRequest{Layer: 0, Experts: []int{5, 6}})
	done := make(chan error)
	go func() {
		_, err := s.Acquire(ctx, &plugin.AcquireRequest{Step: 1, Slices: []plugin.Slice{{Tensor: m.Routed(2)[0], Expert: 7}}})
		done <- err
	}()
	for queued := 0; queued == 0; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		queued = s.devs[0].queue.LenPrio(readq.Demand)
		s.mu.Unlock()
	}
	close(r.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := []cache.Key{key(1, 0), key(2, 7), key(0, 5), key(0, 6), key(1, 1), key(1, 2)}
	if diff := cmp.Diff(want, r.reads(s)); diff != "" {
		t.Errorf("read order (-want +got):\n%s", diff)
	}
}

// TestHintDropsStale: once a layer's router has chosen, the guesses for
// that layer it did not choose and every hint for an earlier layer are
// not read; guesses for later layers and the chosen experts are. A new
// guess for a layer replaces the old one.
func TestHintDropsStale(t *testing.T) {
	ctx := context.Background()
	s, m := openOneWorker(t)
	r := recordReads(t, s, m)

	hint := func(l int, e []int, spec bool) {
		t.Helper()
		if err := s.Hint(ctx, &plugin.HintRequest{Layer: l, Experts: e, Speculative: spec}); err != nil {
			t.Fatal(err)
		}
	}
	hint(0, []int{7}, true)
	<-r.blocked // the worker is inside L0/E7's read
	hint(0, []int{1, 2}, true)
	hint(0, []int{3}, false)
	hint(1, []int{0, 1, 3}, true)
	hint(2, []int{6}, true)
	// A second guess for a layer replaces the first: L1/E3 and L2/E6 go.
	hint(1, []int{0, 1, 2}, true)
	hint(2, []int{4}, true)
	// Layer 1 chose 2 and 5: L0's current and speculative hints are past,
	// L1's guesses 0 and 1 wrong, L2's guess still to come.
	hint(1, []int{2, 5}, false)
	close(r.release)
	want := []cache.Key{key(0, 7), key(1, 2), key(1, 5), key(2, 4)}
	if diff := cmp.Diff(want, r.reads(s)); diff != "" {
		t.Errorf("reads (-want +got):\n%s", diff)
	}
	s.mu.Lock()
	for l := range int32(3) {
		for e := range int32(8) {
			if s.devs[0].queue.Queued(key(l, e)) {
				t.Errorf("L%d/E%d still marked queued", l, e)
			}
		}
	}
	s.mu.Unlock()
	// A dropped guess can be hinted again and is then read.
	hint(1, []int{0}, true)
	if got := r.reads(s); got[len(got)-1] != key(1, 0) {
		t.Errorf("re-hinted L1/E0 not read: %v", got)
	}
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

func TestHolds(t *testing.T) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 4)
	s := New()
	plugintest.CheckHolds(t, s, m, budget, map[string]string{"io_workers": "2"}, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inflight == 0 && s.queueLen() == 0
	})
}

func TestPartialAcquire(t *testing.T) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 4)
	s := New()
	plugintest.CheckPartial(t, s, m, budget, map[string]string{"io_workers": "2"}, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inflight == 0 && s.queueLen() == 0
	})
}
