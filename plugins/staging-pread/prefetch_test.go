package stagingpread

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/cache"
	"github.com/k3-inference/k3/core/plugin/plugintest"
)

// TestReadOrder holds the only I/O worker inside a speculative read, queues
// speculative, current and demand work behind it, and checks the order the
// reads then run in: demand, current hints, speculative hints.
func TestReadOrder(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 16)
	s := New()
	if _, err := s.Open(ctx, m.Request(budget, t.TempDir(), map[string]string{"io_workers": "1"})); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)

	// Which unit each file range belongs to (its first part's offset).
	unitAt := map[[2]int64]cache.Key{}
	for l := 0; l < m.Layers; l++ {
		for e := 0; e < m.Experts; e++ {
			p := s.lay.unitParts(s.req, l, e, 0)[0]
			unitAt[[2]int64{int64(p.shard), p.fileOff}] = cache.Key{Layer: int32(l), Expert: int32(e)}
		}
	}
	var mu sync.Mutex
	var order []cache.Key
	blocked, gate := make(chan struct{}), make(chan struct{})
	orig := pread
	t.Cleanup(func() { pread = orig })
	first := true
	pread = func(f *os.File, p []byte, off int64) (int, error) {
		for i, name := range m.Req.Shards {
			if k, ok := unitAt[[2]int64{int64(i), off}]; ok && sameFile(f.Name(), name) {
				mu.Lock()
				order = append(order, k)
				wait := first
				first = false
				mu.Unlock()
				if wait {
					close(blocked)
					<-gate
				}
			}
		}
		return orig(f, p, off)
	}

	s.Hint(ctx, &plugin.HintRequest{Layer: 1, Experts: []int{0, 1, 2}, Speculative: true})
	<-blocked // the worker is inside L1/E0's read
	s.Hint(ctx, &plugin.HintRequest{Layer: 0, Experts: []int{5, 6}})
	done := make(chan error)
	go func() {
		_, err := s.Acquire(ctx, &plugin.AcquireRequest{Step: 1, Slices: []plugin.Slice{{Tensor: m.Routed(2)[0], Expert: 7}}})
		done <- err
	}()
	for queued := 0; queued == 0; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		queued = len(s.queue[prioDemand])
		s.mu.Unlock()
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for idle := false; !idle; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		idle = s.inflight == 0 && len(s.queue[1])+len(s.queue[2]) == 0
		s.mu.Unlock()
	}
	key := func(l, e int32) cache.Key { return cache.Key{Layer: l, Expert: e} }
	want := []cache.Key{key(1, 0), key(2, 7), key(0, 5), key(0, 6), key(1, 1), key(1, 2)}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("read order (-want +got):\n%s", diff)
	}
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
