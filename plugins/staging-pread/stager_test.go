package stagingpread

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/plugintest"
)

func TestMain(m *testing.M) {
	plugintest.SelfTest(func() { plugin.ServeStager(New()) })
	os.Exit(m.Run())
}

func newStager() plugin.Stager { return New() }

// budgets runs from everything cached down to a single layer's top-k
// experts: the least a decode step can work with.
func budgets(t *testing.T, m *plugintest.Model) []plugintest.Budget {
	t.Helper()
	var out []plugintest.Budget
	for _, b := range []struct {
		name  string
		slots int
	}{
		{"everything fits", m.Layers * m.Experts},
		{"half the experts", m.Layers * m.Experts / 2},
		{"two layers", 2 * m.TopK},
		{"one layer barely fits", m.TopK},
	} {
		n, err := Footprint(&m.Req, b.slots)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, plugintest.Budget{Name: b.name, Bytes: n})
	}
	return out
}

func TestMatchesFile(t *testing.T) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(2, 6, m.Layers, m.Experts, m.TopK, 1.0)
	want := plugintest.Reference(t, m, tr)
	for _, opts := range []map[string]string{
		{"cache_policy": "lfru"},
		{"cache_policy": "lru", "io_workers": "1"},
		{"direct_io": "off", "io_workers": "8"},
	} {
		t.Run(fmt.Sprint(opts), func(t *testing.T) {
			got := plugintest.CheckBudgets(t, newStager, m, tr, budgets(t, m), opts)
			plugintest.MustEqual(t, "vs direct file reads", want, got)
		})
	}
}

func TestSubprocessKill(t *testing.T) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(4, 6, m.Layers, m.Experts, m.TopK, 1.0)
	b := budgets(t, m)
	got := plugintest.CheckKillRestart(t, plugintest.Subprocess("staging-pread"), m, tr, b[2].Bytes, nil)
	plugintest.MustEqual(t, "after two kill -9 and restarts", plugintest.Reference(t, m, tr), got)
}

// TestPinnedUnderConcurrency has many steps in flight on a cache far too
// small for all of them: each step checks its bytes, lets the others churn
// the cache, and checks them again before releasing. A pinned slot that got
// evicted and refilled would fail the second check.
func TestPinnedUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 3*m.TopK)
	s := New()
	r, _, err := plugintest.NewRunner(ctx, s, m, m.Request(budget, t.TempDir(), map[string]string{"io_workers": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer s.Close(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 60; i++ {
				step := uint64(g*1000 + i + 1)
				layer := rng.IntN(m.Layers)
				var slices []plugin.Slice
				for _, e := range rng.Perm(m.Experts)[:m.TopK] {
					for _, id := range m.Routed(layer) {
						slices = append(slices, plugin.Slice{Tensor: id, Expert: e})
					}
				}
				s.Hint(ctx, &plugin.HintRequest{Layer: rng.IntN(m.Layers), Experts: rng.Perm(m.Experts)[:2], Speculative: true})
				err := r.Check(ctx, step, slices)
				if err == nil {
					// Still pinned: the bytes must not have moved.
					err = r.Check(ctx, step, slices)
				}
				if err != nil && !strings.Contains(err.Error(), "pinned") {
					errs <- fmt.Errorf("goroutine %d step %d: %w", g, step, err)
					return
				}
				s.Release(ctx, &plugin.ReleaseRequest{Step: step})
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st, _ := s.Stats(ctx)
	if st.Evictions == 0 {
		t.Error("the cache never evicted: the test did not stress pinning")
	}
}

func TestBudgetTooSmall(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	one, _ := Footprint(&m.Req, 1)
	res, _ := Footprint(&m.Req, 0)
	// Each refusal says which part does not fit.
	if _, err := New().Open(ctx, m.Request(one-1, t.TempDir(), nil)); err == nil || !strings.Contains(err.Error(), "holds the always-needed") {
		t.Errorf("open under one slot: %v", err)
	}
	if _, err := New().Open(ctx, m.Request(res-1, t.TempDir(), nil)); err == nil || !strings.Contains(err.Error(), "is under the always-needed") {
		t.Errorf("open under the always-needed bytes: %v", err)
	}
	// Fewer slots than one step's experts: the step fails and says why.
	s := New()
	budget, _ := Footprint(&m.Req, m.TopK-1)
	if _, err := s.Open(ctx, m.Request(budget, t.TempDir(), nil)); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	var slices []plugin.Slice
	for e := 0; e < m.TopK; e++ {
		slices = append(slices, plugin.Slice{Tensor: m.Routed(0)[0], Expert: e})
	}
	_, err := s.Acquire(ctx, &plugin.AcquireRequest{Step: 1, Slices: slices})
	if err == nil || !strings.Contains(err.Error(), "budget") {
		t.Errorf("step over the budget: %v", err)
	}
	// Nothing stays pinned after the failure: a smaller step works.
	if _, err := s.Acquire(ctx, &plugin.AcquireRequest{Step: 2, Slices: slices[:m.TopK-1]}); err != nil {
		t.Errorf("step within the budget after a failed one: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 8)
	tests := []struct {
		name string
		call func(s *Stager) error
	}{
		{"unknown option", func(s *Stager) error {
			_, err := s.Open(ctx, m.Request(budget, t.TempDir(), map[string]string{"direct_oi": "on"}))
			return err
		}},
		{"tensor out of range", func(s *Stager) error {
			_, err := s.Acquire(ctx, &plugin.AcquireRequest{Slices: []plugin.Slice{{Tensor: 1 << 20}}})
			return err
		}},
		{"expert out of range", func(s *Stager) error {
			_, err := s.Acquire(ctx, &plugin.AcquireRequest{Slices: []plugin.Slice{{Tensor: m.Routed(1)[0], Expert: m.Experts}}})
			return err
		}},
		{"hint unknown layer", func(s *Stager) error {
			return s.Hint(ctx, &plugin.HintRequest{Layer: 99, Experts: []int{1}})
		}},
		{"hint bad expert", func(s *Stager) error {
			return s.Hint(ctx, &plugin.HintRequest{Layer: 0, Experts: []int{-1}})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			if tc.name != "unknown option" {
				if _, err := s.Open(ctx, m.Request(budget, t.TempDir(), nil)); err != nil {
					t.Fatal(err)
				}
				defer s.Close(ctx)
			}
			if err := tc.call(s); err == nil {
				t.Error("no error")
			}
		})
	}
}

// TestDirectIOFallback simulates filesystems that refuse O_DIRECT, at open
// (tmpfs on older kernels) and at read, and checks the stager falls back to
// buffered reads, says so, and still returns the right bytes.
func TestDirectIOFallback(t *testing.T) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(9, 2, m.Layers, m.Experts, m.TopK, 1.0)
	want := plugintest.Reference(t, m, tr)
	budget, _ := Footprint(&m.Req, 2*m.TopK)
	origOpen, origRead := openDirect, pread
	t.Cleanup(func() { openDirect, pread = origOpen, origRead })
	refuseOpen := func(string) (*os.File, error) { return nil, &os.PathError{Op: "open", Err: syscall.EINVAL} }
	refuseRead := func(f *os.File, p []byte, off int64) (int, error) {
		if fl, _ := fcntlFlags(f); fl&syscall.O_DIRECT != 0 {
			return 0, syscall.EINVAL
		}
		return origRead(f, p, off)
	}
	tests := []struct {
		name      string
		open      func(string) (*os.File, error)
		read      func(*os.File, []byte, int64) (int, error)
		opt       string
		direct    bool
		mode      string
		wantError bool
	}{
		{"direct io works", origOpen, origRead, "auto", true, "direct-io=on", false},
		{"refused at open", refuseOpen, origRead, "auto", false, "refused by the filesystem", false},
		{"refused at read", origOpen, refuseRead, "auto", false, "refused at read", false},
		{"refused at open with direct_io=on", refuseOpen, origRead, "on", false, "", true},
		{"off by option", origOpen, origRead, "off", false, "off by option", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			openDirect, pread = tc.open, tc.read
			ctx := context.Background()
			s := New()
			r, _, err := plugintest.NewRunner(ctx, s, m, m.Request(budget, t.TempDir(), map[string]string{"direct_io": tc.opt}))
			if tc.wantError {
				if err == nil {
					s.Close(ctx)
					t.Fatal("opened")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer s.Close(ctx)
			if err := r.Run(ctx, tr); err != nil {
				t.Fatal(err)
			}
			plugintest.MustEqual(t, "bytes", want, r.Digest())
			st, _ := s.Stats(ctx)
			if st.DirectIO != tc.direct || !strings.Contains(st.Mode, tc.mode) {
				t.Errorf("DirectIO %v mode %q; want %v and %q", st.DirectIO, st.Mode, tc.direct, tc.mode)
			}
		})
	}
}

// TestOnTmpfs runs on /dev/shm, which refuses O_DIRECT on older kernels
// and accepts it on newer ones; either way the bytes are right and the mode
// says which it was.
func TestOnTmpfs(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "k3-pread-test-")
	if err != nil {
		t.Skip("no /dev/shm:", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m := plugintest.Build(t, dir, plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(9, 2, m.Layers, m.Experts, m.TopK, 1.0)
	got := plugintest.CheckBudgets(t, newStager, m, tr, budgets(t, m)[3:], nil)
	plugintest.MustEqual(t, "tmpfs", plugintest.Reference(t, m, tr), got)
}

func fcntlFlags(f *os.File) (int, error) {
	flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFL, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(flags), nil
}

var _ = errors.New

// TestPolicyHitRate replays a skewed routing trace with Acquire alone (no
// hints, so the cache sees demand only and the run is deterministic)
// through a cache holding half a token's experts: LRU evicts every unit
// before its layer comes round again, LFRU keeps the popular ones.
func TestPolicyHitRate(t *testing.T) {
	ctx := context.Background()
	spec := plugintest.Spec{Shards: 1, Layers: 6, Experts: 32, TopK: 4, ExpertSizes: []int64{100, 100}, Seed: 3}
	m := plugintest.Build(t, t.TempDir(), spec)
	tr := plugintest.ZipfTrace(5, 60, m.Layers, m.Experts, m.TopK, 1.2)
	budget, _ := Footprint(&m.Req, m.Layers*m.TopK/2)
	hits := map[string]float64{}
	for _, policy := range []string{"lru", "lfru"} {
		s := New()
		if _, err := s.Open(ctx, m.Request(budget, t.TempDir(), map[string]string{"cache_policy": policy})); err != nil {
			t.Fatal(err)
		}
		var step uint64
		for _, tok := range tr {
			for l, experts := range tok {
				var slices []plugin.Slice
				for _, e := range experts {
					slices = append(slices, plugin.Slice{Tensor: m.Routed(l)[0], Expert: e})
				}
				step++
				if _, err := s.Acquire(ctx, &plugin.AcquireRequest{Step: step, Slices: slices}); err != nil {
					t.Fatal(err)
				}
				s.Release(ctx, &plugin.ReleaseRequest{Step: step})
			}
		}
		st, _ := s.Stats(ctx)
		s.Close(ctx)
		hits[policy] = float64(st.Hits) / float64(st.Hits+st.Misses)
	}
	t.Logf("hit rate: LRU %.1f%%, LFRU %.1f%%", 100*hits["lru"], 100*hits["lfru"])
	if hits["lfru"] < hits["lru"]+0.1 {
		t.Errorf("LFRU %.3f not clearly above LRU %.3f", hits["lfru"], hits["lru"])
	}
}

func BenchmarkColdExperts(b *testing.B) {
	for _, dio := range []string{"on", "off"} {
		b.Run("direct_io="+dio, func(b *testing.B) {
			plugintest.BenchmarkColdExperts(b, New(), Footprint, map[string]string{"direct_io": dio})
		})
	}
}
