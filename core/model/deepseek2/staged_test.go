package deepseek2_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/ggufreq"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/plugin/plugintest"
	"github.com/k3-inference/k3/core/synth"
)

// countingStager serves slices from the files and counts the expert
// slices it is asked for.
type countingStager struct {
	plugintest.FileStager
	mu       sync.Mutex
	acquires int
}

func (s *countingStager) Acquire(ctx context.Context, req *plugin.AcquireRequest) (*plugin.AcquireResponse, error) {
	s.mu.Lock()
	s.acquires++
	s.mu.Unlock()
	return s.FileStager.Acquire(ctx, req)
}

// TestStagedBudget runs the routed experts through a stager whose budget
// holds only two experts' units beside the always-needed bytes, so every
// MoE layer's chosen experts are acquired, run and released in parts: the
// logits of a prompt and a greedy continuation are bit-identical to the
// run on the plain mapping of the file.
func TestStagedBudget(t *testing.T) {
	c := small()
	c.Type = synth.TypeQ4_K_M
	path := writeModel(t, c)
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	plain := load(t, path, model.Options{Threads: 2})
	toks := prompt(20, c.NVocab)
	want := batchLogits(t, plain, toks, 512)
	wantG := greedy(t, plain, toks[:5], 12)

	// every expert slice of every routed tensor is one unit
	const unit = 1 << 20
	foot := func(req *plugin.OpenRequest, units int) (int64, error) {
		r, err := engine.PageFootprint(req, 0)
		return r + int64(units)*unit, err
	}
	req, err := ggufreq.OpenRequest(f)
	if err != nil {
		t.Fatal(err)
	}
	resident, _ := foot(req, 0)
	st := &countingStager{}
	name := "deepseek2-test-" + t.Name()
	host.RegisterStager(name, func() plugin.Stager { return st })
	s, err := engine.OpenStaged(context.Background(), f, engine.StageOptions{Launch: host.Launch{Name: name, InProcess: true},
		Budget: resident + 3*unit, Footprint: foot})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.MaxExperts(1); got >= c.NExpertUsed {
		t.Fatalf("MaxExperts %d: the budget holds every chosen expert, the test proves nothing", got)
	}
	a, ok := model.Lookup("deepseek2")
	if !ok || !a.Staged() {
		t.Fatal("deepseek2 is not registered as a staged architecture")
	}
	m, err := a.New(f, s, model.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	got := batchLogits(t, m, toks, 512)
	if d, at := maxAbs(want, got); d != 0 {
		t.Errorf("staged logits differ from the plain mapping's by %.3g at position %d", d, at)
	}
	if gotG := greedy(t, m, toks[:5], 12); !cmp.Equal(wantG, gotG) {
		t.Errorf("staged greedy (-plain +staged):\n%s", cmp.Diff(wantG, gotG))
	}
	stats, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stager: %d acquires, MaxExperts %d, stats %+v", st.acquires, s.MaxExperts(1), stats)
	// prefill of 20 + greedy prefill of 5 + 11 decode steps, each over
	// NLayer-NDense MoE layers, each in at least two parts when a token
	// chooses NExpertUsed > MaxExperts experts
	if minimum := 2 * (c.NLayer - c.NDense); st.acquires < minimum {
		t.Errorf("%d acquires, want at least %d", st.acquires, minimum)
	}
}

func greedy(t *testing.T, m model.Model, toks []int32, n int) []int32 {
	t.Helper()
	r := engine.NewRunner(m, engine.Batch, 0)
	last, err := r.Prefill(toks, false)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Greedy(last, n)
	if err != nil {
		t.Fatal(fmt.Errorf("greedy: %w", err))
	}
	return out
}
