package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/kimik3"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/ggufreq"
	"github.com/k3-inference/k3/core/runtime"
	"github.com/k3-inference/k3/core/synth"
	stagingmmap "github.com/k3-inference/k3/plugins/staging-mmap"
	stagingpread "github.com/k3-inference/k3/plugins/staging-pread"
)

var stageFootprint = map[string]func(*plugin.OpenRequest, int) (int64, error){
	"staging-pread": stagingpread.Footprint,
	"staging-mmap":  stagingmmap.Footprint,
}

// stageModel writes a tiny synthetic kimi-k3 split in shards.
func stageModel(t *testing.T) (string, synth.Config) {
	t.Helper()
	cfg, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Type = synth.TypeQ2_K
	res, err := synth.Write(filepath.Join(t.TempDir(), "k3.gguf"), cfg, synth.WriteOptions{Split: gguf.SplitOptions{MaxTensors: 40}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Paths {
		if err := syncFile(p); err != nil {
			t.Fatal(err)
		}
	}
	return res.Paths[0], cfg
}

var stagePrompt = []int32{1, 17, 300, 5, 999, 42, 8, 600, 31, 7}

// trace is every logit a run produced: the prompt's, then each decode
// step's, and the greedy tokens.
type trace struct {
	logits [][]float32
	tokens []int32
}

// runTrace prefills the prompt and decodes n tokens greedily; before
// decode step i, at(i) runs if set.
func runTrace(t *testing.T, m model.Model, mode engine.Mode, n int, at func(step int)) trace {
	t.Helper()
	r := engine.NewRunner(m, mode, 4)
	r.SetContext(len(stagePrompt) + n)
	v := m.Params().Vocab
	lg, err := r.Prefill(stagePrompt, true)
	if err != nil {
		t.Fatal(err)
	}
	var tr trace
	for i := range stagePrompt {
		tr.logits = append(tr.logits, lg[i*v:(i+1)*v])
	}
	last := tr.logits[len(tr.logits)-1]
	for i := 0; i < n; i++ {
		tok := engine.Argmax(last)
		tr.tokens = append(tr.tokens, tok)
		if at != nil {
			at(i)
		}
		if last, err = r.Decode(tok); err != nil {
			t.Fatalf("decode step %d: %v", i, err)
		}
		tr.logits = append(tr.logits, last)
	}
	return tr
}

func sameTrace(t *testing.T, got, want trace) {
	t.Helper()
	if fmt.Sprint(got.tokens) != fmt.Sprint(want.tokens) {
		t.Errorf("tokens %v, want %v", got.tokens, want.tokens)
	}
	for i := range want.logits {
		for j, w := range want.logits[i] {
			if math.Float32bits(got.logits[i][j]) != math.Float32bits(w) {
				t.Fatalf("row %d logit %d: %v, want %v (bit for bit)", i, j, got.logits[i][j], w)
			}
		}
	}
}

// plainTrace runs the model on the plain mapping of the file, which is
// closed afterwards so the stagers own the page cache.
func plainTrace(t *testing.T, path string, mode engine.Mode, n int) trace {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	return runTrace(t, m, mode, n, nil)
}

// openStager opens path through the stager name at a budget of units
// expert units, with o's other options; both close with the test.
func openStager(t *testing.T, path, name string, inProcess bool, units int, o engine.StageOptions) (*engine.Staged, *gguf.File) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	req, err := ggufreq.OpenRequest(f)
	if err != nil {
		t.Fatal(err)
	}
	o.Footprint = stageFootprint[name]
	if o.Budget, err = o.Footprint(req, units); err != nil {
		t.Fatal(err)
	}
	o.Launch = launch(name, inProcess)
	st, err := engine.OpenStaged(context.Background(), f, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, f
}

// openStagedModel opens path through the stager name at a budget of units
// expert units.
func openStagedModel(t *testing.T, path, name string, inProcess bool, units int) (*engine.Staged, model.Model, *gguf.File) {
	t.Helper()
	st, f := openStager(t, path, name, inProcess, units, engine.StageOptions{Lookahead: true})
	m, err := kimik3.New(f, st, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	return st, m, f
}

// TestStagedForwardBitIdentical runs the forward pass with weights from
// each built-in stager, in-process and as `k3 plugin` processes, at
// budgets from everything-fits down to one layer's experts (batched
// prompt) and one token's experts (token-by-token prompt), and wants the
// logits of the plain file mapping bit for bit.
func TestStagedForwardBitIdentical(t *testing.T) {
	path, cfg := stageModel(t)
	const n = 5
	want := map[engine.Mode]trace{
		engine.Batch: plainTrace(t, path, engine.Batch, n),
		engine.Step:  plainTrace(t, path, engine.Step, n),
	}
	budgets := []struct {
		name  string
		units int
		mode  engine.Mode
	}{
		{"all", cfg.NLayer * cfg.NExpert, engine.Batch},
		{"layer", cfg.NExpert, engine.Batch},
		{"topk", cfg.NExpertUsed, engine.Step},
	}
	for _, name := range []string{"staging-pread", "staging-mmap"} {
		for _, inProcess := range []bool{true, false} {
			for _, b := range budgets {
				t.Run(fmt.Sprintf("%s/inprocess=%v/%s", name, inProcess, b.name), func(t *testing.T) {
					st, m, _ := openStagedModel(t, path, name, inProcess, b.units)
					got := runTrace(t, m, b.mode, n, nil)
					sameTrace(t, got, want[b.mode])
					stats, err := st.Stats()
					if err != nil {
						t.Fatal(err)
					}
					if stats.Hits+stats.Misses == 0 || stats.Predicted == 0 {
						t.Errorf("no expert traffic counted: %+v", stats)
					}
					if stats.ResidentBytes > stats.BudgetBytes {
						t.Errorf("resident %d over the budget %d", stats.ResidentBytes, stats.BudgetBytes)
					}
					t.Logf("%s: hits %d misses %d read %d B, lookahead precision %.2f", stats.Mode, stats.Hits, stats.Misses, stats.BytesRead, stats.Precision())
				})
			}
		}
	}
}

// hintLog is a stager that notes its hints: "L3" a layer's current hint,
// "?3" a guess for it.
type hintLog struct {
	*engine.Staged
	log []string
}

func (h *hintLog) HintExperts(layer int, experts []int32, speculative bool) error {
	tag := "L"
	if speculative {
		tag = "?"
	}
	h.log = append(h.log, fmt.Sprint(tag, layer))
	return h.Staged.HintExperts(layer, experts, speculative)
}

// TestStagedLookaheadDepth: with prefetch depth d, every routed layer's
// experts are guessed after each of the d layers before it (from fresher
// state each time), and the logits stay those of the plain mapping.
func TestStagedLookaheadDepth(t *testing.T) {
	path, cfg := stageModel(t)
	want := plainTrace(t, path, engine.Batch, 2)
	for _, depth := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("depth", depth), func(t *testing.T) {
			st, f := openStager(t, path, "staging-pread", true, cfg.NLayer*cfg.NExpert,
				engine.StageOptions{Lookahead: true, LookaheadDepth: depth})
			h := &hintLog{Staged: st}
			m, err := kimik3.New(f, h, model.Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			sameTrace(t, runTrace(t, m, engine.Batch, 2, nil), want)
			// The first pass (the prompt): each routed layer's current
			// hint comes after min(depth, layers before it) guesses.
			var pass []string
			for _, e := range h.log {
				if e == fmt.Sprint("L", cfg.NLayer-1) {
					pass = append(pass, e)
					break
				}
				pass = append(pass, e)
			}
			for l := cfg.NDense; l < cfg.NLayer; l++ {
				guesses, seen := 0, false
				for _, e := range pass {
					if e == fmt.Sprint("L", l) {
						seen = true
						break
					}
					if e == fmt.Sprint("?", l) {
						guesses++
					}
				}
				if wantG := min(depth, l); !seen || guesses != wantG {
					t.Errorf("layer %d: %d guesses before its hint (seen %v), want %d; hints %v", l, guesses, seen, wantG, pass)
				}
			}
		})
	}
}

// TestStagedKill9 kills the stager process with SIGKILL during a
// generation, once between decode steps and once at a moment inside one,
// and wants the generation to complete with the same logits and tokens.
func TestStagedKill9(t *testing.T) {
	path, cfg := stageModel(t)
	const n = 8
	want := plainTrace(t, path, engine.Batch, n)
	for _, name := range []string{"staging-pread", "staging-mmap"} {
		t.Run(name, func(t *testing.T) {
			st, m, _ := openStagedModel(t, path, name, false, cfg.NExpert)
			sup := st.Supervisor()
			kill := func() {
				if p := sup.Process(); p.Pid() != 0 {
					syscall.Kill(p.Pid(), syscall.SIGKILL)
				}
			}
			got := runTrace(t, m, engine.Batch, n, func(step int) {
				switch step {
				case 2:
					kill()
					for deadline := time.Now().Add(5 * time.Second); !sup.Process().Exited() && time.Now().Before(deadline); {
						time.Sleep(time.Millisecond)
					}
				case 5:
					// Lands inside the next forward pass (or just before it).
					time.AfterFunc(time.Duration(1+step%3)*time.Millisecond, kill)
				}
			})
			sameTrace(t, got, want)
			if r := sup.Restarts(); r < 2 {
				t.Errorf("%d restarts, want 2", r)
			}
		})
	}
}

// TestEvalProfile runs k3 eval through each stager by flags: the logits and
// tokens are those of the plain path, the mode line names the stager and
// budget, and the stager's numbers end stderr as JSON.
func TestEvalProfile(t *testing.T) {
	// Plugin processes re-execute the test binary, which then acts as k3.
	t.Setenv("K3_TEST_AS_K3", "1")
	// The plain path computes with the reference ops; so must the profile.
	t.Setenv("K3_KERNELS__NAME", "reference")
	path, _ := stageModel(t)
	args := []string{"-m", path, "--tokens", "5,17,300,2,99,42,7", "--full", "-n", "6", "-t", "2", "-ub", "3"}
	want := runEvalArgs(t, args...)
	for _, tc := range []struct{ stager, mode string }{{"pread", "inprocess"}, {"mmap", "process"}} {
		t.Run(tc.stager, func(t *testing.T) {
			var out, errb bytes.Buffer
			a := append(append([]string{"eval"}, args...), "--profile", "auto", "--memory-budget", "6M",
				"--stager", tc.stager, "--stager-mode", tc.mode, "--lookahead", "true")
			if code := runMain(a, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if out.String() != runEvalText(t, args...) {
				t.Error("output differs from the plain path's")
			}
			mode := fmt.Sprintf("stager=%s(%s)", tc.stager, tc.mode)
			if !strings.Contains(errb.String(), mode) || !strings.Contains(errb.String(), "budget=6.0MiB") {
				t.Errorf("no mode line with %s and the budget in:\n%s", mode, errb.String())
			}
			var rep struct {
				Stats stagerReport `json:"stager_stats"`
			}
			lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
			for _, l := range lines {
				if strings.HasPrefix(l, `{"stager_stats"`) {
					if err := json.Unmarshal([]byte(l), &rep); err != nil {
						t.Fatal(err)
					}
				}
			}
			s := rep.Stats
			if s.DecodeTokens != len(want.greedy)-1 || s.Hits+s.Misses == 0 || s.LookaheadPredicted == 0 || s.BudgetBytes == 0 || s.BudgetBytes > 6<<20 {
				t.Errorf("stager stats %+v", s)
			}
		})
	}
}

// runEvalText is k3 eval's stdout.
func runEvalText(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := runMain(append([]string{"eval"}, args...), &out, &errb); code != 0 {
		t.Fatalf("k3 eval %v: exit %d: %s", args, code, errb.String())
	}
	return out.String()
}

// TestStageBudgetReservesState: the stager's budget leaves room for the
// sequence state at the context (the live sequence at a full
// context and one snapshot's recurrent copy), and a budget that cannot
// hold it is refused with the reason.
func TestStageBudgetReservesState(t *testing.T) {
	path, _ := stageModel(t)
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fixed, perToken, err := kimik3.StateSize(f, f)
	if err != nil {
		t.Fatal(err)
	}
	prof := config.Defaults()
	prof.Memory.Budget = config.Size(1 << 30)
	budget := func(ctx int) int64 {
		t.Helper()
		// A fixed ubatch: the chunk sized from the budget would take
		// activations from the stager too (TestStageBudgetChunk).
		b, err := runtime.Plan(f, &prof, runtime.Options{Context: ctx, UBatch: 512, Footprints: stagerFootprints})
		if err != nil {
			t.Fatal(err)
		}
		return b.Stager
	}
	small, large := budget(1000), budget(100000) // 1024 and 100096 rows
	if got, want := small-large, perToken*(100096-1024); got != want {
		t.Errorf("a context of 100000 instead of 1000 took %d bytes from the stager, want %d", got, want)
	}
	if got, want := int64(1<<30)-small, int64(128<<20)+2*fixed+1024*perToken; got != want { // 128 MiB: the floor of the rest
		t.Errorf("reserve %d at context 1000, want %d", got, want)
	}
	b, err := runtime.Plan(f, &prof, runtime.Options{Context: 1 << 24, Footprints: stagerFootprints})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Check(); err == nil || !strings.Contains(err.Error(), "sequence state") || !strings.Contains(err.Error(), "leave nothing for the weights") {
		t.Errorf("a context whose state exceeds the budget: %v", err)
	}
}

// TestStageBudgetChunk: without a fixed ubatch the prefill chunk is sized
// from the budget (the model's activations per token, in half the room
// beside the always-needed weights), capped by the context, and what it
// reserves comes out of the stager's part.
func TestStageBudgetChunk(t *testing.T) {
	path, _ := stageModel(t)
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, perToken, err := kimik3.Activations(f, f)
	if err != nil {
		t.Fatal(err)
	}
	prof := config.Defaults()
	prof.Memory.Budget = config.Size(1 << 30)
	plan := func(ctx, ub int) engine.Budget {
		t.Helper()
		b, err := runtime.Plan(f, &prof, runtime.Options{Context: ctx, UBatch: ub, Footprints: stagerFootprints})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fixed, auto := plan(100000, 512), plan(100000, 0)
	if fixed.Chunk != 512 || fixed.Activations != 0 {
		t.Errorf("fixed ubatch: chunk %d, activations %d", fixed.Chunk, fixed.Activations)
	}
	if auto.Chunk <= 512 || auto.Stager != fixed.Stager-auto.Activations || auto.Activations < int64(auto.Chunk)*perToken {
		t.Errorf("auto: chunk %d, activations %d (%d per token), stager %d vs %d", auto.Chunk, auto.Activations, perToken, auto.Stager, fixed.Stager)
	}
	if short := plan(300, 0); short.Chunk != 300 {
		t.Errorf("context 300: chunk %d", short.Chunk)
	}
}

// TestStagedShardsOnTwoDevices: a split model whose shards were moved
// into two places (another directory found through the shard path; on
// /dev/shm, a device of its own, where the machine has one) runs through
// staging-pread with one group of readers per place, as a plugin process,
// and gives the plain mapping's logits and tokens bit for bit; the
// stats count reads in both groups and the mode line names each group's
// workers.
func TestStagedShardsOnTwoDevices(t *testing.T) {
	path, cfg := stageModel(t)
	const n = 4
	want := plainTrace(t, path, engine.Step, n)
	f0, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	paths := f0.Paths()
	f0.Close()
	if len(paths) < 2 {
		t.Fatalf("%d shards; the test wants a split model", len(paths))
	}
	for _, tc := range []struct{ devices, dir string }{{"dir", t.TempDir()}, {"auto", "/dev/shm"}} {
		t.Run(tc.devices, func(t *testing.T) {
			other := tc.dir
			if tc.devices == "auto" {
				d, err := os.MkdirTemp(tc.dir, "k3-stagetest-")
				if err != nil {
					t.Skip("no /dev/shm")
				}
				defer os.RemoveAll(d)
				if statDev(t, d) == statDev(t, path) {
					t.Skipf("%s shares the temporary directory's device", d)
				}
				other = d
			}
			// The odd shards move away (a copy, so that the first
			// case's set stays whole for the next).
			var moved []string
			for i := 1; i < len(paths); i += 2 {
				b, err := os.ReadFile(paths[i])
				if err != nil {
					t.Fatal(err)
				}
				dst := filepath.Join(other, filepath.Base(paths[i]))
				if err := os.WriteFile(dst, b, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(paths[i], paths[i]+".away"); err != nil {
					t.Fatal(err)
				}
				moved = append(moved, paths[i])
			}
			defer func() {
				for _, p := range moved {
					os.Rename(p+".away", p)
				}
			}()
			f, err := gguf.OpenWith(path, gguf.OpenOptions{ShardPath: []string{other}})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			req, err := ggufreq.OpenRequest(f)
			if err != nil {
				t.Fatal(err)
			}
			o := engine.StageOptions{Lookahead: true, Footprint: stageFootprint["staging-pread"], Launch: launch("staging-pread", false),
				Options: map[string]string{"devices": tc.devices, "io_workers": "2", "device_workers": f.Paths()[1] + "=3"}}
			if o.Budget, err = o.Footprint(req, cfg.NExpertUsed); err != nil {
				t.Fatal(err)
			}
			st, err := engine.OpenStaged(context.Background(), f, o)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			m, err := kimik3.New(f, st, model.Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			sameTrace(t, runTrace(t, m, engine.Step, n, nil), want)
			stats, err := st.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if len(stats.Devices) != 2 {
				t.Fatalf("%d device groups, want 2: %+v", len(stats.Devices), stats.Devices)
			}
			for _, d := range stats.Devices {
				if d.Reads == 0 {
					t.Errorf("group %s (shards %v) read nothing", d.Name, d.Shards)
				}
			}
			if w := "workers=2@" + stats.Devices[0].Name + "+3@" + stats.Devices[1].Name + " "; !strings.Contains(st.Mode(), w) {
				t.Errorf("mode %q lacks %q", st.Mode(), w)
			}
			t.Logf("%s: %+v", st.Mode(), stats.Devices)
		})
	}
}

func statDev(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}
