package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/plugin/ggufreq"
	"github.com/k3-inference/k3/core/runtime"
)

// budgetEval runs k3 eval on path through stager at a memory budget and
// returns its exit code, stdout and stderr.
func budgetEval(args []string, stager, mode, budget string) (int, string, string) {
	var out, errb bytes.Buffer
	a := append(append([]string{"eval"}, args...), "--profile", "auto", "--memory-budget", budget,
		"--stager", stager, "--stager-mode", mode, "--lookahead", "true")
	code := runMain(a, &out, &errb)
	return code, out.String(), errb.String()
}

// minBudget is the least memory budget the start-up check accepts for
// path through stager at seqLen tokens.
func minBudget(t *testing.T, path, stager string, seqLen int) int64 {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prof := config.Defaults()
	prof.Stager.Name = stager
	b, err := runtime.Plan(f, &prof, runtime.Options{Context: seqLen, Footprints: stagerFootprints})
	if err != nil {
		t.Fatal(err)
	}
	return b.MinTotal()
}

// TestBudgetBoundary (issue 23): the least budget the start-up check
// accepts really runs a batched prompt (every expert of a layer chosen,
// acquired in groups the stager holds) and gives the plain path's output;
// a byte less is refused at start with the numbers. Before, 4M on the tiny
// model started with one slot and every request failed with "cache: full
// of pinned entries".
func TestBudgetBoundary(t *testing.T) {
	t.Setenv("K3_TEST_AS_K3", "1")
	t.Setenv("K3_KERNELS__NAME", "reference")
	path, _ := stageModel(t)
	const prompt, gen = 16, 4
	args := []string{"-m", path, "--tokens", "5,17,300,2,99,42,7,800,13,77,501,64,3,900,11,250", "-n", strconv.Itoa(gen), "-t", "2", "-ub", "16"}
	want := runEvalText(t, args...)
	for _, tc := range []struct{ stager, mode string }{{"pread", "process"}, {"mmap", "inprocess"}} {
		t.Run(tc.stager, func(t *testing.T) {
			least := minBudget(t, path, tc.stager, prompt+gen)
			code, _, stderr := budgetEval(args, tc.stager, tc.mode, strconv.FormatInt(least-1, 10))
			if code == 0 {
				t.Fatalf("a budget of %d bytes, one under the least, was accepted", least-1)
			}
			for _, w := range []string{"cannot run one step", strconv.FormatInt(least-1, 10) + " bytes",
				"needs at least", strconv.FormatInt(least, 10) + " bytes", "always-needed", "expert unit", "sequence state"} {
				if !strings.Contains(stderr, w) {
					t.Errorf("refusal lacks %q:\n%s", w, stderr)
				}
			}
			code, out, stderr := budgetEval(args, tc.stager, tc.mode, strconv.FormatInt(least, 10))
			if code != 0 {
				t.Fatalf("the least accepted budget %d failed: exit %d:\n%s", least, code, stderr)
			}
			if out != want {
				t.Error("output differs from the plain path's")
			}
			for _, w := range []string{"budget=", "always-needed=", "step-pin=", "(1x", "state-reserve=", "stager-budget="} {
				if !strings.Contains(stderr, w) {
					t.Errorf("mode line lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

// TestBudgetClamped: a budget above what the machine can give is lowered
// to it with a warning naming both numbers, and runs; lowered below what
// one step needs, it is refused at start.
func TestBudgetClamped(t *testing.T) {
	t.Setenv("K3_TEST_AS_K3", "1")
	t.Setenv("K3_KERNELS__NAME", "reference")
	path, _ := stageModel(t)
	args := []string{"-m", path, "--tokens", "5,17,300,2", "-n", "2", "-t", "2"}
	least := minBudget(t, path, "pread", 6)
	t.Cleanup(func() { machine = config.Detect })
	for _, tc := range []struct {
		avail int64
		ok    bool
	}{{least + 1<<20, true}, {least - 1, false}} {
		machine = func(string) config.Machine { return config.Machine{MemTotal: 1 << 30, MemAvailable: tc.avail} }
		code, _, stderr := budgetEval(args, "pread", "inprocess", "1G")
		if (code == 0) != tc.ok {
			t.Errorf("available %d: exit %d:\n%s", tc.avail, code, stderr)
		}
		for _, w := range []string{"warning: memory budget 1.0GiB (1073741824 bytes) is more than this machine can give",
			strconv.FormatInt(tc.avail, 10) + " bytes", "MemAvailable"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("available %d: stderr lacks %q:\n%s", tc.avail, w, stderr)
			}
		}
		if !tc.ok && !strings.Contains(stderr, "cannot run one step") {
			t.Errorf("available %d: no refusal:\n%s", tc.avail, stderr)
		}
	}
}

// TestPageFootprintBoundsStagers: the footprint used for a stager that
// does not say its own is never less than a built-in stager's.
func TestPageFootprintBoundsStagers(t *testing.T) {
	path, _ := stageModel(t)
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req, err := ggufreq.OpenRequest(f)
	if err != nil {
		t.Fatal(err)
	}
	for name, foot := range stagerFootprints {
		for _, n := range []int{0, 1, 8} {
			own, err1 := foot(req, n)
			bound, err2 := engine.PageFootprint(req, n)
			if err1 != nil || err2 != nil || bound < own {
				t.Errorf("%s, %d units: PageFootprint %d under the stager's %d (%v, %v)", name, n, bound, own, err1, err2)
			}
		}
	}
}
