package main

import (
	"context"
	"io"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/runtime"
)

// TestRuntimeFollowsStagerRestart: the runtime every command opens
// (bench's included) runs on through a stager restart with the kernels in
// a process: at the least budget the stager holds a step in (its slots,
// which the kernels map, are shared memory), the stager is killed between
// tokens; its restart maps new slots, and the logits and greedy tokens
// stay those of the same kernels on the plain mapping, with no product
// falling back to the reference. (The runtime installs PluginKernels.Follow
// for this; leaving it out shows only when a new slot mapping takes an old
// one's address, which this test cannot force.)
func TestRuntimeFollowsStagerRestart(t *testing.T) {
	names := kernelsUnderTest()
	if len(names) == 0 {
		t.Skip("no SIMD kernels on this CPU")
	}
	const n = 6
	path, _ := stageModel(t)
	k := config.Kernels{Name: names[len(names)-1], Mode: "process"}
	want := runKernels(t, path, openKernelsBackend(t, k), n, nil)

	prof := config.Defaults()
	prof.Stager.Name, prof.Stager.Mode, prof.Kernels = "pread", "process", k
	ctxLen := len(kernelsPrompt) + n + 1
	prof.Memory.Budget = config.Size(minBudget(t, path, "pread", ctxLen))
	rt, err := runtime.Open(context.Background(), path, &prof, runtimeOptions(runtime.Options{Threads: 2, Context: ctxLen}, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	sup := rt.Staged.Supervisor()
	got := runKernelsModel(t, rt.Model, n, func(i int) {
		if i != 2 {
			return
		}
		p := sup.Process()
		syscall.Kill(p.Pid(), syscall.SIGKILL)
		for start := time.Now(); !p.Exited() && time.Since(start) < 5*time.Second; {
			time.Sleep(time.Millisecond)
		}
	})
	if sup.Restarts() == 0 {
		t.Error("the stager was not restarted")
	}
	if !bitsEqual(want.logits, got.logits) || !slices.Equal(want.greedy, got.greedy) {
		t.Errorf("logits after the restart differ from the plain mapping's (max rel %g); greedy %v, want %v", maxRelDiff(want.logits, got.logits), got.greedy, want.greedy)
	}
	if s := rt.Kernels.(*engine.PluginKernels).Stats(); s.Fallbacks != 0 {
		t.Errorf("%d products fell back to the reference: a weight was not found in a mapped file", s.Fallbacks)
	}
}
