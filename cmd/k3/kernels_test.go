package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/kimik3"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/synth"
	kernelsavx2 "github.com/k3-inference/k3/plugins/kernels-avx2"
)

// kernelsModel writes a tiny synthetic kimi-k3 file of type typ.
func kernelsModel(t *testing.T, typ synth.OutType) string {
	t.Helper()
	cfg, _ := synth.Preset("tiny")
	cfg.Type = typ
	path := filepath.Join(t.TempDir(), typ.String()+".gguf")
	if _, err := synth.Write(path, cfg, synth.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return path
}

var kernelsPrompt = []int32{1, 17, 300, 42, 5, 999, 64, 128, 7}

// kernelsRun is what one backend computed: every prompt position's logits
// and a greedy continuation.
type kernelsRun struct {
	logits []float32
	greedy []int32
}

// openKernelsBackend starts the kernels k names, with the test binary standing in
// for k3 when it re-executes itself.
func openKernelsBackend(t *testing.T, k config.Kernels, env ...string) engine.Kernels {
	t.Helper()
	b, err := engine.OpenKernels(context.Background(), k, engine.KernelsOptions{Env: append([]string{"K3_TEST_AS_K3=1"}, env...), ArenaSize: 64 << 20, ScratchSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// runKernels evaluates the prompt and n greedy tokens on b; step, if not
// nil, runs before each decoded token.
func runKernels(t *testing.T, path string, b engine.Kernels, n int, step func(i int)) kernelsRun {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f, model.Options{Threads: 2, Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	return runKernelsModel(t, m, n, step)
}

func runKernelsModel(t *testing.T, m model.Model, n int, step func(i int)) kernelsRun {
	t.Helper()
	r := engine.NewRunner(m, engine.Batch, 0)
	r.SetContext(len(kernelsPrompt) + n + 1)
	logits, err := r.Prefill(kernelsPrompt, true)
	if err != nil {
		t.Fatal(err)
	}
	run := kernelsRun{logits: append([]float32(nil), logits...)}
	v := m.Params().Vocab
	last := logits[len(logits)-v:]
	for i := 0; i < n; i++ {
		tok := engine.Argmax(last)
		run.greedy = append(run.greedy, tok)
		if step != nil {
			step(i)
		}
		if last, err = r.Decode(tok); err != nil {
			t.Fatalf("decode %d: %v", i, err)
		}
	}
	return run
}

// kernelsUnderTest are the built-in kernels this CPU runs.
func kernelsUnderTest() []string {
	var names []string
	cpu := engine.HostCPU()
	if cpu.AVX2 {
		names = append(names, "avx2")
	}
	if cpu.AVX512 {
		names = append(names, "avx512")
	}
	return names
}

// maxRelDiff is the largest |a-b| relative to the largest |a|.
func maxRelDiff(a, b []float32) float64 {
	var d, m float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
		m = max(m, math.Abs(float64(a[i])))
	}
	return d / m
}

// TestKernelsBackends runs tiny models of each file type on the reference
// and on every kernels plugin this CPU runs, in-process and as a `k3
// plugin` process: every backend gives the reference's logits bit for bit
// on both sides of the boundary and continues greedily with its tokens.
func TestKernelsBackends(t *testing.T) {
	const n = 12
	for _, typ := range []synth.OutType{synth.TypeF32, synth.TypeQ8_0, synth.TypeQ4_K_M, synth.TypeQ2_K} {
		t.Run(typ.String(), func(t *testing.T) {
			path := kernelsModel(t, typ)
			ref := runKernels(t, path, openKernelsBackend(t, config.Kernels{Name: "reference"}), n, nil)
			for _, name := range kernelsUnderTest() {
				// On its pure-Go level a plugin computes what the core
				// does, so the data plane (weights by reference, arena
				// buffers, batching, activation reuse) is checked bit for bit.
				generic := openKernelsBackend(t, config.Kernels{Name: name, Mode: "process"}, kernelsavx2.LevelEnv+"=generic")
				if g := runKernels(t, path, generic, n, nil); !bitsEqual(ref.logits, g.logits) || !slices.Equal(ref.greedy, g.greedy) {
					t.Errorf("%s: the plugin process on the generic level differs from the reference (max rel %g)", name, maxRelDiff(ref.logits, g.logits))
				}

				in := openKernelsBackend(t, config.Kernels{Name: name, Mode: "inprocess"})
				out := openKernelsBackend(t, config.Kernels{Name: name, Mode: "process"})
				a := runKernels(t, path, in, n, nil)
				b := runKernels(t, path, out, n, nil)
				if !bitsEqual(a.logits, b.logits) {
					t.Errorf("%s: logits differ between in-process and process (max rel %g)", name, maxRelDiff(a.logits, b.logits))
				}
				if diff := cmp.Diff(a.greedy, b.greedy); diff != "" {
					t.Errorf("%s: greedy differs between in-process and process (-in +out):\n%s", name, diff)
				}
				if diff := cmp.Diff(ref.greedy, a.greedy); diff != "" {
					t.Errorf("%s: greedy differs from the reference (-ref +%s):\n%s", name, name, diff)
				}
				// Every kernel returns the reference's float bit for bit, so the
				// whole forward pass does.
				if !bitsEqual(ref.logits, a.logits) {
					t.Errorf("%s: logits differ from the reference (max rel %g)", name, maxRelDiff(ref.logits, a.logits))
				}
				st := out.(*engine.PluginKernels).Stats()
				if st.Fallbacks != 0 || st.Batches == 0 {
					t.Errorf("%s: %d batches, %d products fell back to the reference", name, st.Batches, st.Fallbacks)
				}
				t.Logf("%s (%s): identical in and out of process and to the reference", name, in.Name())
			}
		})
	}
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestKernelsLevels forces every instruction-set level of each kernels
// plugin (K3_KERNELS_LEVEL) in a plugin process: all give the reference's
// logits bit for bit and continue greedily as it does.
func TestKernelsLevels(t *testing.T) {
	const n = 8
	path := kernelsModel(t, synth.TypeQ2_K)
	ref := runKernels(t, path, openKernelsBackend(t, config.Kernels{Name: "reference"}), n, nil)
	levels := map[string][]string{"avx2": kernelsavx2.Levels(), "avx512": {"generic", "avx512", "vnni", "vnni256"}}
	for _, name := range kernelsUnderTest() {
		for _, level := range levels[name] {
			t.Run(name+"/"+level, func(t *testing.T) {
				b := openKernelsBackend(t, config.Kernels{Name: name, Mode: "process"}, kernelsavx2.LevelEnv+"="+level)
				if !strings.Contains(b.Name(), "("+level+")") {
					t.Fatalf("backend %q is not on level %s", b.Name(), level)
				}
				got := runKernels(t, path, b, n, nil)
				if !bitsEqual(ref.logits, got.logits) {
					t.Errorf("logits differ from the reference (max rel %g)", maxRelDiff(ref.logits, got.logits))
				}
				if diff := cmp.Diff(ref.greedy, got.greedy); diff != "" {
					t.Errorf("greedy differs from the reference (-ref +got):\n%s", diff)
				}
			})
		}
	}
	t.Run("unknown level", func(t *testing.T) {
		_, err := engine.OpenKernels(context.Background(), config.Kernels{Name: "avx2", Mode: "process"},
			engine.KernelsOptions{Env: []string{"K3_TEST_AS_K3=1", kernelsavx2.LevelEnv + "=avx9000"}})
		if err == nil || !strings.Contains(err.Error(), "avx9000") {
			t.Errorf("err = %v, want one naming the level", err)
		}
	})
	t.Run("forced kernels the CPU lacks", func(t *testing.T) {
		_, err := engine.OpenKernels(context.Background(), config.Kernels{Name: "avx512", Mode: "process"},
			engine.KernelsOptions{CPU: &engine.CPU{AVX2: true}})
		if err == nil || !strings.Contains(err.Error(), "lacks AVX-512") {
			t.Errorf("err = %v, want one saying the CPU lacks AVX-512", err)
		}
	})
}

// TestKernelsKill9 kills the kernels process during a generation, between
// two tokens and at a random moment (likely inside a batch): the
// supervisor restarts it, the batch is re-issued from the arena and the
// generation completes with the tokens and logits of an undisturbed run.
func TestKernelsKill9(t *testing.T) {
	names := kernelsUnderTest()
	if len(names) == 0 {
		t.Skip("no SIMD kernels on this CPU")
	}
	const n = 16
	path := kernelsModel(t, synth.TypeQ4_K_M)
	k := config.Kernels{Name: names[len(names)-1], Mode: "process"}
	want := runKernels(t, path, openKernelsBackend(t, k), n, nil)
	for _, how := range []string{"between tokens", "mid-batch"} {
		t.Run(how, func(t *testing.T) {
			b := openKernelsBackend(t, k)
			pk := b.(*engine.PluginKernels)
			kill := func() {
				if pid := pk.Supervisor().Process().Pid(); pid > 0 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			got := runKernels(t, path, b, n, func(i int) {
				switch {
				case how == "between tokens" && i == 4:
					kill()
					for start := time.Now(); !pk.Supervisor().Process().Exited() && time.Since(start) < 5*time.Second; {
						time.Sleep(time.Millisecond)
					}
				case how == "mid-batch" && i == 4:
					time.AfterFunc(300*time.Microsecond, kill)
				}
			})
			if diff := cmp.Diff(want.greedy, got.greedy); diff != "" {
				t.Errorf("greedy differs after kill -9 (-want +got):\n%s", diff)
			}
			if !bitsEqual(want.logits, got.logits) {
				t.Error("prompt logits differ")
			}
			if pk.Supervisor().Restarts() == 0 {
				t.Error("the plugin was not restarted")
			}
			t.Logf("%s: restarts %d, re-issued batches %d", how, pk.Supervisor().Restarts(), pk.Stats().Restarts)
		})
	}
}

// TestEvalKernelsFlag runs k3 eval with --kernels in both modes and checks
// the mode line and that the greedy continuation does not depend on it.
func TestEvalKernelsFlag(t *testing.T) {
	kernelsEnv = []string{"K3_TEST_AS_K3=1"}
	defer func() { kernelsEnv = nil }()
	path := kernelsModel(t, synth.TypeQ2_K)
	var first string
	for _, name := range append([]string{"reference"}, kernelsUnderTest()...) {
		for _, mode := range []string{"inprocess", "process"} {
			args := []string{"eval", "-m", path, "--tokens", "1,2,3,4", "-n", "6", "-t", "2", "--kernels", name, "--kernels-mode", mode}
			var out, errs strings.Builder
			if code := runMain(args, &out, &errs); code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errs.String())
			}
			if !strings.Contains(errs.String(), " kernels="+name) {
				t.Errorf("%s/%s: no kernels mode line in %q", name, mode, errs.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			greedy := lines[len(lines)-1]
			if first == "" {
				first = greedy
			} else if greedy != first {
				t.Errorf("%s/%s: %s, want %s", name, mode, greedy, first)
			}
		}
	}
	var errs strings.Builder
	if code := runMain([]string{"eval", "-m", path, "--tokens", "1", "--kernels", "avx1024"}, &strings.Builder{}, &errs); code == 0 || !strings.Contains(errs.String(), "avx1024") {
		t.Errorf("--kernels avx1024: exit %d, %q", code, errs.String())
	}
}

// TestKernelsStaged runs a kernels plugin process on weights a stager
// serves, from the shard file (mmap) or its shared-memory slots (pread),
// at a budget where one layer's experts barely fit: the logits are those
// of the same kernels on the plain mapping, bit for bit, and no product
// falls back to the reference.
func TestKernelsStaged(t *testing.T) {
	names := kernelsUnderTest()
	if len(names) == 0 {
		t.Skip("no SIMD kernels on this CPU")
	}
	const n = 6
	path, cfg := stageModel(t)
	k := config.Kernels{Name: names[len(names)-1], Mode: "process"}
	want := runKernels(t, path, openKernelsBackend(t, k), n, nil)
	for _, tc := range []struct {
		name string
		kill bool
	}{{"staging-pread", false}, {"staging-mmap", false}, {"staging-pread", true}, {"staging-mmap", true}} {
		name := tc.name
		t.Run(fmt.Sprintf("%s/kill-stager=%v", name, tc.kill), func(t *testing.T) {
			st, f := openStager(t, path, name, false, cfg.NExpert, engine.StageOptions{Lookahead: true})
			b := openKernelsBackend(t, k)
			b.(*engine.PluginKernels).Follow(st)
			m, err := kimik3.New(f, st, model.Options{Threads: 2, Backend: b})
			if err != nil {
				t.Fatal(err)
			}
			var step func(int)
			if tc.kill {
				// The stager dies between tokens; its restart maps its
				// regions anew, and the kernels must follow.
				step = func(i int) {
					if i == 2 {
						syscall.Kill(st.Supervisor().Process().Pid(), syscall.SIGKILL)
						for start := time.Now(); !st.Supervisor().Process().Exited() && time.Since(start) < 5*time.Second; {
							time.Sleep(time.Millisecond)
						}
					}
				}
			}
			got := runKernelsModel(t, m, n, step)
			if tc.kill && st.Supervisor().Restarts() == 0 {
				t.Error("the stager was not restarted")
			}
			if !bitsEqual(want.logits, got.logits) || !slices.Equal(want.greedy, got.greedy) {
				t.Errorf("staged logits differ from the plain mapping's (max rel %g)", maxRelDiff(want.logits, got.logits))
			}
			if s := b.(*engine.PluginKernels).Stats(); s.Fallbacks != 0 {
				t.Errorf("%d products fell back to the reference: a weight was not found in a mapped file", s.Fallbacks)
			}
		})
	}
}

// BenchmarkKernelsRoundTrip is the boundary alone: an Execute with no ops,
// in-process and to a `k3 plugin` process.
func BenchmarkKernelsRoundTrip(b *testing.B) {
	names := kernelsUnderTest()
	if len(names) == 0 {
		b.Skip("no SIMD kernels on this CPU")
	}
	for _, mode := range []string{"inprocess", "process"} {
		b.Run(mode, func(b *testing.B) {
			kb, err := engine.OpenKernels(context.Background(), config.Kernels{Name: names[0], Mode: mode},
				engine.KernelsOptions{Env: []string{"K3_TEST_AS_K3=1"}, ArenaSize: 1 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer kb.Close()
			pk := kb.(*engine.PluginKernels)
			req := &plugin.ExecuteRequest{Arena: pk.Arena().Path()}
			for b.Loop() {
				if _, err := pk.Supervisor().Execute(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
