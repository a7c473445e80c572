package plugintest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
)

// Budget is a named memory budget for CheckBudgets.
type Budget struct {
	Name  string
	Bytes int64
}

// CheckBudgets opens a fresh stager from newStager at every budget, plays
// tr through it checking every byte against the files, and checks the
// stats. Every budget must give the same bytes; the digest is returned for
// comparisons across stagers.
func CheckBudgets(t *testing.T, newStager func() plugin.Stager, m *Model, tr Trace, budgets []Budget, opts map[string]string) []byte {
	t.Helper()
	return checkBudgets(t, func() (plugin.Stager, error) { return newStager(), nil }, m, tr, budgets, opts)
}

// CheckBudgetsProcess is CheckBudgets on the stager plugin l starts (a
// binary, for a third party), in a process of its own for each budget
// under a Supervisor, as k3 runs it.
func CheckBudgetsProcess(t *testing.T, l host.Launch, m *Model, tr Trace, budgets []Budget, opts map[string]string) []byte {
	t.Helper()
	if l.Logger == nil {
		l.Logger = slog.New(slog.DiscardHandler)
	}
	return checkBudgets(t, func() (plugin.Stager, error) {
		sup, err := host.SuperviseStager(context.Background(), l)
		if err != nil {
			return nil, err
		}
		return sup, nil
	}, m, tr, budgets, opts)
}

func checkBudgets(t *testing.T, newStager func() (plugin.Stager, error), m *Model, tr Trace, budgets []Budget, opts map[string]string) []byte {
	t.Helper()
	var first []byte
	for _, b := range budgets {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			st, err := newStager()
			if err != nil {
				t.Fatal(err)
			}
			r, _, err := NewRunner(ctx, st, m, m.Request(b.Bytes, t.TempDir(), opts))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			defer st.Close(ctx)
			if err := r.Run(ctx, tr); err != nil {
				t.Fatal(err)
			}
			stats, err := st.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("budget %d: %d hits %d misses %d evictions, %d reads %d bytes, resident %d, wait %v; %s",
				b.Bytes, stats.Hits, stats.Misses, stats.Evictions, stats.Reads, stats.BytesRead, stats.ResidentBytes, stats.WaitTime, stats.Mode)
			if err := CheckStats(stats, b.Bytes); err != nil {
				t.Error(err)
			}
			if first == nil {
				first = r.Digest()
			} else if !bytes.Equal(first, r.Digest()) {
				t.Error("bytes differ from the first budget's")
			}
		})
	}
	return first
}

// CheckKillRestart runs tr through the stager plugin l under a Supervisor,
// killing the process with SIGKILL at two points of the sequence; every
// step interrupted by the kill is re-issued after the restart. It returns
// the digest, which must equal an undisturbed run's.
func CheckKillRestart(t *testing.T, l host.Launch, m *Model, tr Trace, budget int64, opts map[string]string) []byte {
	t.Helper()
	ctx := context.Background()
	if l.Logger == nil {
		l.Logger = slog.New(slog.DiscardHandler)
	}
	sup, err := host.SuperviseStager(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(ctx)
	r, _, err := NewRunner(ctx, sup, m, m.Request(budget, "", opts))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	kills := map[[2]int]bool{{len(tr) / 3, 0}: true, {2 * len(tr) / 3, m.Layers / 2}: true}
	restarted := 0
	// A third kill lands at a random moment, likely inside a call.
	killed := make(chan struct{})
	for tok := range tr {
		if tok == len(tr)/2 {
			time.AfterFunc(time.Millisecond, func() {
				syscall.Kill(sup.Process().Pid(), syscall.SIGKILL)
				close(killed)
			})
		}
		for l := 0; l < m.Layers; l++ {
			if kills[[2]int{tok, l}] {
				if err := syscall.Kill(sup.Process().Pid(), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			err := r.TraceStep(ctx, tr, tok, l)
			if errors.Is(err, host.ErrRestarted) {
				restarted++
				if err := r.Remap(sup.Regions()); err != nil {
					t.Fatal(err)
				}
				err = r.TraceStep(ctx, tr, tok, l)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	<-killed
	stats, err := sup.Stats(ctx)
	if errors.Is(err, host.ErrRestarted) { // the last kill came after the last step
		restarted++
		stats, err = sup.Stats(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := len(kills) + 1; restarted != want || sup.Restarts() != want {
		t.Errorf("%d calls saw ErrRestarted, %d restarts, after %d kills", restarted, sup.Restarts(), want)
	}
	if err := CheckStats(stats, budget); err != nil {
		t.Error(err)
	}
	return r.Digest()
}

// Reference returns the digest of tr read straight from the files, which
// every stager must reproduce.
func Reference(t *testing.T, m *Model, tr Trace) []byte {
	t.Helper()
	r := &Runner{M: m}
	h := newHash()
	for tok := range tr {
		for l := 0; l < m.Layers; l++ {
			for _, sl := range r.stepSlices(l, tr[tok][l]) {
				b, err := m.Want(sl)
				if err != nil {
					t.Fatal(err)
				}
				h.Write(b)
			}
		}
	}
	return h.Sum(nil)
}

// SelfTest lets a plugin test binary serve the stager when re-executed by
// Subprocess; call it first thing in TestMain.
func SelfTest(serve func()) {
	if os.Getenv("K3_PLUGINTEST_SERVE") == "1" {
		serve()
		os.Exit(0)
	}
}

// Subprocess is a Launch that re-executes the test binary as the plugin
// (see SelfTest).
func Subprocess(name string) host.Launch {
	return host.Launch{Name: name, Path: os.Args[0], Env: []string{"K3_PLUGINTEST_SERVE=1"}}
}

// MustEqual fails t if two digests differ.
func MustEqual(t *testing.T, what string, a, b []byte) {
	t.Helper()
	if !bytes.Equal(a, b) {
		t.Errorf("%s: bytes differ (%x vs %x)", what, a[:6], b[:6])
	} else {
		t.Logf("%s: identical (%x)", what, a[:6])
	}
}

// CheckHolds: units hint reads bring in stay until the model reaches their
// layer, however many guesses follow. budget must hold four units (a
// stager may fit a fifth). Layer 1's current hint and two guesses for
// layer 2 fill the cache; four guesses for layer 3 follow; the Acquires
// of layers 1 and 2 must then read nothing (without the holds the guesses
// evict the fresh units, which have the fewest accesses). idle reports
// that the stager has no read queued or in flight.
func CheckHolds(t *testing.T, st plugin.Stager, m *Model, budget int64, opts map[string]string, idle func() bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Open(ctx, m.Request(budget, t.TempDir(), opts)); err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	read := func() int64 {
		s, err := st.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s.BytesRead
	}
	hint := func(layer int, spec bool, experts ...int) {
		if err := st.Hint(ctx, &plugin.HintRequest{Layer: layer, Experts: experts, Speculative: spec}); err != nil {
			t.Fatal(err)
		}
		for !idle() {
			time.Sleep(time.Millisecond)
		}
	}
	hint(1, false, 0, 1)
	hint(2, true, 2, 3)
	hint(3, true, 4, 5, 6, 7)
	before := read()
	for step, layer := range []int{1, 2} {
		var slices []plugin.Slice
		for _, e := range []int{2 * step, 2*step + 1} {
			for _, id := range m.Routed(layer) {
				slices = append(slices, plugin.Slice{Tensor: id, Expert: e})
			}
		}
		if _, err := st.Acquire(ctx, &plugin.AcquireRequest{Step: uint64(step + 1), Slices: slices}); err != nil {
			t.Fatal(err)
		}
		if err := st.Release(ctx, &plugin.ReleaseRequest{Step: uint64(step + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if more := read() - before; more != 0 {
		t.Errorf("the Acquires of hinted units read %d bytes: guesses evicted them", more)
	}
}

// CheckPartial: a Partial Acquire waits for (and reads) only its first
// Wait slices, pins the others that are resident and lists the rest as
// pending without reading them; the bytes it hands over are the file's.
// Layer 1's experts 0 and 1 are hinted and read first; then a partial
// Acquire of experts 5, 0, 3, 1 (expert by expert) waiting for expert 5
// must leave exactly expert 3's slices pending, and one waiting for
// nothing, of expert 3 alone, must read nothing. budget must hold four
// units. idle is as for CheckHolds.
func CheckPartial(t *testing.T, st plugin.Stager, m *Model, budget int64, opts map[string]string, idle func() bool) {
	t.Helper()
	ctx := context.Background()
	r, _, err := NewRunner(ctx, st, m, m.Request(budget, t.TempDir(), opts))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(ctx)
	defer r.Close()
	settle := func() int64 {
		for !idle() {
			time.Sleep(time.Millisecond)
		}
		s, err := st.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s.BytesRead
	}
	if err := st.Hint(ctx, &plugin.HintRequest{Layer: 1, Experts: []int{0, 1}}); err != nil {
		t.Fatal(err)
	}
	settle()
	unit := len(m.Routed(1))
	var sl []plugin.Slice
	for _, e := range []int{5, 0, 3, 1} {
		for _, id := range m.Routed(1) {
			sl = append(sl, plugin.Slice{Tensor: id, Expert: e})
		}
	}
	resp, err := st.Acquire(ctx, &plugin.AcquireRequest{Step: 1, Slices: sl, Partial: true, Wait: unit})
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for i := 2 * unit; i < 3*unit; i++ {
		want = append(want, i)
	}
	if !slices.Equal(resp.Pending, want) {
		t.Errorf("pending %v, want expert 3's slices %v", resp.Pending, want)
	}
	for i, s := range sl {
		if slices.Contains(resp.Pending, i) {
			continue
		}
		w, err := m.Want(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.views.Bytes(resp.Locations[i])
		if err != nil || !bytes.Equal(got, w) {
			t.Errorf("slice %d (expert %d): %d bytes differ from the file (%v)", i, s.Expert, countDiff(got, w), err)
		}
	}
	r.views.Forget(resp.Locations)
	before := settle()
	resp, err = st.Acquire(ctx, &plugin.AcquireRequest{Step: 2, Slices: sl[2*unit : 3*unit], Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Pending) != unit {
		t.Errorf("expert 3 alone, waiting for none: pending %v, want all %d slices", resp.Pending, unit)
	}
	if more := settle() - before; more != 0 {
		t.Errorf("a partial Acquire that waits for nothing read %d bytes", more)
	}
	for step := uint64(1); step <= 2; step++ {
		if err := st.Release(ctx, &plugin.ReleaseRequest{Step: step}); err != nil {
			t.Fatal(err)
		}
	}
}
