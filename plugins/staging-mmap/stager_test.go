package stagingmmap

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/plugintest"
)

func TestMain(m *testing.M) {
	plugintest.SelfTest(func() { plugin.ServeStager(New()) })
	os.Exit(m.Run())
}

func newStager() plugin.Stager { return New() }

func budgets(t *testing.T, m *plugintest.Model) []plugintest.Budget {
	t.Helper()
	var out []plugintest.Budget
	for _, b := range []struct {
		name  string
		units int
	}{
		{"everything fits", m.Layers * m.Experts},
		{"half the experts", m.Layers * m.Experts / 2},
		{"two layers", 2 * m.TopK},
		{"one layer barely fits", m.TopK},
	} {
		n, err := Footprint(&m.Req, b.units)
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
		{"cache_policy": "lru", "mlock": "true"},
	} {
		t.Run(fmt.Sprint(opts), func(t *testing.T) {
			got := plugintest.CheckBudgets(t, newStager, m, tr, budgets(t, m), opts)
			plugintest.MustEqual(t, "vs direct file reads", want, got)
		})
	}
}

// TestEvictCold: MADV_COLD leaves eviction to the kernel's reclaim, so
// the page cache may exceed the budget; only the bytes are checked.
func TestEvictCold(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(2, 4, m.Layers, m.Experts, m.TopK, 1.0)
	s := New()
	r, _, err := plugintest.NewRunner(ctx, s, m, m.Request(budgets(t, m)[3].Bytes, "", map[string]string{"evict": "cold"}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer s.Close(ctx)
	if err := r.Run(ctx, tr); err != nil {
		t.Fatal(err)
	}
	plugintest.MustEqual(t, "evict=cold", plugintest.Reference(t, m, tr), r.Digest())
}

// TestStaysWithinBudget checks after every token, by mincore, that the
// page cache holds no more of the shards than the budget.
func TestStaysWithinBudget(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(6, 8, m.Layers, m.Experts, m.TopK, 1.0)
	b := budgets(t, m)[2]
	s := New()
	r, _, err := plugintest.NewRunner(ctx, s, m, m.Request(b.Bytes, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer s.Close(ctx)
	for tok := range tr {
		if err := r.RunToken(ctx, tr, tok); err != nil {
			t.Fatal(err)
		}
		st, _ := s.Stats(ctx)
		if st.ResidentBytes > b.Bytes {
			t.Fatalf("token %d: %d bytes of the shards in the page cache, budget %d", tok, st.ResidentBytes, b.Bytes)
		}
	}
	st, _ := s.Stats(ctx)
	if st.Evictions == 0 || st.Misses == 0 {
		t.Errorf("no evictions or misses (%+v): the budget did not bind", st)
	}
}

func TestSubprocessKill(t *testing.T) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(4, 6, m.Layers, m.Experts, m.TopK, 1.0)
	got := plugintest.CheckKillRestart(t, plugintest.Subprocess("staging-mmap"), m, tr, budgets(t, m)[2].Bytes, nil)
	plugintest.MustEqual(t, "after two kill -9 and restarts", plugintest.Reference(t, m, tr), got)
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	one, _ := Footprint(&m.Req, 1)
	res, _ := Footprint(&m.Req, 0)
	tests := []struct {
		name string
		req  *plugin.OpenRequest
		want string
	}{
		{"budget under one unit", m.Request(one-1, "", nil), "holds the always-needed"},
		{"budget under the always-needed bytes", m.Request(res-1, "", nil), "is under the always-needed"},
		{"unknown option", m.Request(one, "", map[string]string{"mlok": "true"}), "mlok"},
		{"bad evict", m.Request(one, "", map[string]string{"evict": "later"}), "evict"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			_, err := s.Open(ctx, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %q", err, tc.want)
			}
			s.Close(ctx)
		})
	}
	s := New()
	if _, err := s.Open(ctx, m.Request(one*8, "", nil)); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if _, err := s.Acquire(ctx, &plugin.AcquireRequest{Slices: []plugin.Slice{{Tensor: m.Routed(0)[0], Expert: -1}}}); err == nil {
		t.Error("negative expert acquired")
	}
	if err := s.Hint(ctx, &plugin.HintRequest{Layer: -5}); err == nil {
		t.Error("hint of a layer without experts accepted")
	}
}

func TestSubtract(t *testing.T) {
	res := []span{{0, 4096, 8192}, {0, 16384, 20480}, {1, 0, 4096}}
	tests := []struct {
		in   span
		want []span
	}{
		{span{0, 0, 4096}, []span{{0, 0, 4096}}},
		{span{0, 0, 24576}, []span{{0, 0, 4096}, {0, 8192, 16384}, {0, 20480, 24576}}},
		{span{0, 4096, 8192}, nil},
		{span{1, 0, 8192}, []span{{1, 4096, 8192}}},
		{span{2, 0, 4096}, []span{{2, 0, 4096}}},
	}
	for _, tc := range tests {
		if got := subtract(tc.in, res); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("subtract(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func BenchmarkColdExperts(b *testing.B) {
	plugintest.BenchmarkColdExperts(b, New(), Footprint, nil)
}

// TestRedropAfterRelease: a unit evicted while another mapping (the
// core's view, whose faults map cached neighbours) still holds its pages
// stays in the page cache; once that mapping lets go, the next Release
// drops it, so the page cache comes back within the budget.
func TestRedropAfterRelease(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	budget, _ := Footprint(&m.Req, 1)
	s := New()
	if _, err := s.Open(ctx, m.Request(budget, "", nil)); err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	unit := func(e int) []plugin.Slice {
		var out []plugin.Slice
		for _, id := range m.Routed(0) {
			out = append(out, plugin.Slice{Tensor: id, Expert: e})
		}
		return out
	}
	resp, err := s.Acquire(ctx, &plugin.AcquireRequest{Step: 1, Slices: unit(0)})
	if err != nil {
		t.Fatal(err)
	}
	// Another mapping of the shard holds expert 0's pages.
	f, err := os.Open(m.Req.Shards[resp.Locations[0].Region])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	other, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	var x byte
	for _, loc := range resp.Locations {
		for off := loc.Offset; off < loc.Offset+loc.Size; off += page {
			x += other[off]
		}
	}
	touchSink.Add(uint32(x))
	s.Release(ctx, &plugin.ReleaseRequest{Step: 1})
	if _, err := s.Acquire(ctx, &plugin.AcquireRequest{Step: 2, Slices: unit(5)}); err != nil {
		t.Fatal(err) // evicts expert 0, whose pages the other mapping keeps
	}
	if err := unix.Munmap(other); err != nil {
		t.Fatal(err)
	}
	s.Release(ctx, &plugin.ReleaseRequest{Step: 2})
	stats, _ := s.Stats(ctx)
	if stats.ResidentBytes > budget {
		t.Errorf("%d bytes of the shards in the page cache, budget %d", stats.ResidentBytes, budget)
	}
}
