package engine_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	_ "github.com/k3-inference/k3/core/model/kimik3"
	"github.com/k3-inference/k3/core/sample"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/core/tokenizer"
)

var tinyPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "engine")
	if err != nil {
		panic(err)
	}
	cfg, _ := synth.Preset("tiny")
	cfg.Type = synth.TypeQ2_K
	tinyPath = filepath.Join(dir, "tiny.gguf")
	if _, err := synth.Write(tinyPath, cfg, synth.WriteOptions{}); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func newEngine(t *testing.T, o engine.Options) *engine.Engine {
	t.Helper()
	f, err := gguf.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if o.Context == 0 {
		o.Context = 256
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(m, tok, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// noEOG keeps generation going to the token limit.
func noEOG(e *engine.Engine) map[int32]float32 {
	bias := map[int32]float32{}
	for _, id := range e.Tokenizer().EOG() {
		bias[id] = float32(math.Inf(-1))
	}
	return bias
}

type run struct {
	tokens []int32
	text   string
	res    engine.Result
	err    error
}

func generate(e *engine.Engine, ctx context.Context, req engine.Request, onPiece func(engine.Piece) error) run {
	var r run
	r.res, r.err = e.Generate(ctx, req, func(p engine.Piece) error {
		if p.Token != tokenizer.NoToken {
			r.tokens = append(r.tokens, p.Token)
		}
		r.text += p.Text
		if onPiece != nil {
			return onPiece(p)
		}
		return nil
	})
	return r
}

func prompt(t *testing.T, e *engine.Engine, text string) []int32 {
	t.Helper()
	toks, err := e.Tokenizer().Tokenize(text, true, true)
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// TestGreedyMatchesRunner: at temperature 0 Generate picks what the
// runner's own greedy loop picks on a fresh sequence.
func TestGreedyMatchesRunner(t *testing.T) {
	for _, mode := range []engine.Mode{engine.Batch, engine.Step} {
		e := newEngine(t, engine.Options{Mode: mode, UBatch: 4})
		p := prompt(t, e, "The quick brown fox jumps over the lazy dog")
		const n = 16
		got := generate(e, context.Background(), engine.Request{Prompt: p, MaxTokens: n, Sampling: sample.Config{LogitBias: noEOG(e)}}, nil)
		if got.err != nil || got.res.Finish != sample.FinishLength || got.res.GeneratedTokens != n {
			t.Fatalf("mode %d: %v %+v", mode, got.err, got.res)
		}
		r := engine.NewRunner(e.Model(), mode, 4)
		r.SetContext(e.Context())
		last, err := r.Prefill(p, false)
		if err != nil {
			t.Fatal(err)
		}
		want, err := r.Greedy(last, n)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got.tokens); d != "" {
			t.Errorf("mode %d: Generate vs Runner.Greedy (-want +got):\n%s", mode, d)
		}
		if text, _ := e.Tokenizer().Detokenize(want, false, false); text != got.text {
			t.Errorf("mode %d: emitted %q, detokenized %q", mode, got.text, text)
		}
	}
}

func TestSeededSampling(t *testing.T) {
	cfg := func(seed uint64) sample.Config {
		return sample.Config{Temperature: 1, TopK: 40, TopP: 0.95, MinP: 0.01, Seed: seed}
	}
	e1 := newEngine(t, engine.Options{})
	e2 := newEngine(t, engine.Options{})
	req := engine.Request{Text: "Once upon a time", MaxTokens: 24}
	var runs []run
	for _, tc := range []struct {
		e    *engine.Engine
		seed uint64
	}{{e1, 7}, {e2, 7}, {e1, 7}, {e1, 8}} {
		req.Sampling = cfg(tc.seed)
		r := generate(tc.e, context.Background(), req, nil)
		if r.err != nil {
			t.Fatal(r.err)
		}
		runs = append(runs, r)
	}
	if d := cmp.Diff(runs[0].tokens, runs[1].tokens); d != "" {
		t.Errorf("same seed, two engines:\n%s", d)
	}
	if d := cmp.Diff(runs[0].tokens, runs[2].tokens); d != "" {
		t.Errorf("same seed, same engine again (prefix reused):\n%s", d)
	}
	if runs[2].res.ReusedTokens != runs[2].res.PromptTokens {
		t.Errorf("repeated prompt reused %d of %d tokens", runs[2].res.ReusedTokens, runs[2].res.PromptTokens)
	}
	if slices.Equal(runs[0].tokens, runs[3].tokens) {
		t.Errorf("seeds 7 and 8 drew the same %d tokens", len(runs[0].tokens))
	}
}

func TestLimits(t *testing.T) {
	e := newEngine(t, engine.Options{Context: 64})
	bias := noEOG(e)
	t.Run("max tokens", func(t *testing.T) {
		r := generate(e, context.Background(), engine.Request{Text: "abc", MaxTokens: 5, Sampling: sample.Config{LogitBias: bias}}, nil)
		if r.err != nil || r.res.Finish != sample.FinishLength || r.res.GeneratedTokens != 5 || len(r.tokens) != 5 {
			t.Errorf("%v %+v %v", r.err, r.res, r.tokens)
		}
	})
	t.Run("context full", func(t *testing.T) {
		r := generate(e, context.Background(), engine.Request{Text: "abc", Sampling: sample.Config{LogitBias: bias}}, nil)
		if r.err != nil || r.res.Finish != sample.FinishLength || r.res.PromptTokens+r.res.GeneratedTokens != 64 {
			t.Errorf("%v %+v", r.err, r.res)
		}
	})
	t.Run("prompt longer than context", func(t *testing.T) {
		long := strings.Repeat("word ", 100)
		r := generate(e, context.Background(), engine.Request{Text: long}, nil)
		if r.err == nil || !strings.Contains(r.err.Error(), "context holds 64") || r.res.GeneratedTokens != 0 {
			t.Errorf("got %v %+v", r.err, r.res)
		}
	})
	t.Run("bad token", func(t *testing.T) {
		r := generate(e, context.Background(), engine.Request{Prompt: []int32{1, 5000}}, nil)
		if r.err == nil || !strings.Contains(r.err.Error(), "outside the vocabulary") {
			t.Errorf("got %v", r.err)
		}
	})
	t.Run("empty prompt", func(t *testing.T) {
		if r := generate(e, context.Background(), engine.Request{Prompt: []int32{}}, nil); r.err == nil {
			t.Error("empty prompt accepted")
		}
	})
	t.Run("end of generation", func(t *testing.T) {
		eog := e.Tokenizer().EOG()
		if len(eog) == 0 {
			t.Fatal("the synthetic vocabulary has no end-of-generation token")
		}
		// a bias that makes the end of message the only choice
		r := generate(e, context.Background(), engine.Request{Text: "abc", MaxTokens: 5, Sampling: sample.Config{LogitBias: map[int32]float32{eog[0]: 1e6}}}, nil)
		if r.err != nil || r.res.Finish != sample.FinishStop || r.res.GeneratedTokens != 1 || len(r.tokens) != 0 || r.text != "" {
			t.Errorf("%v %+v %v %q", r.err, r.res, r.tokens, r.text)
		}
	})
}

// TestMask: a mask decides what may be sampled, sees the tokens generated
// so far, is ignored where it allows nothing, and leaves the sequence's
// own logits as they were (a later request reusing the prompt samples as
// if no mask had been).
func TestMask(t *testing.T) {
	e := newEngine(t, engine.Options{UBatch: 4})
	p := prompt(t, e, "The quick brown fox")
	bias := noEOG(e)
	free := generate(e, context.Background(), engine.Request{Prompt: p, MaxTokens: 4, Sampling: sample.Config{LogitBias: bias}}, nil)
	// Allow only tokens 11, 12, 13 in turn.
	var seen [][]int32
	masked := generate(e, context.Background(), engine.Request{Prompt: p, MaxTokens: 3, Sampling: sample.Config{LogitBias: bias},
		Mask: func(gen []int32, logits []float32) {
			seen = append(seen, append([]int32(nil), gen...))
			for i := range logits {
				if i != 11+len(gen) {
					logits[i] = float32(math.Inf(-1))
				}
			}
		}}, nil)
	if d := cmp.Diff([]int32{11, 12, 13}, masked.tokens); d != "" || masked.err != nil {
		t.Errorf("masked tokens (-want +got):\n%s %v", d, masked.err)
	}
	if d := cmp.Diff([][]int32{nil, {11}, {11, 12}}, seen); d != "" {
		t.Errorf("the mask saw (-want +got):\n%s", d)
	}
	none := generate(e, context.Background(), engine.Request{Prompt: p, MaxTokens: 4, Sampling: sample.Config{LogitBias: bias},
		Mask: func(_ []int32, logits []float32) {
			for i := range logits {
				logits[i] = float32(math.Inf(-1))
			}
		}}, nil)
	again := generate(e, context.Background(), engine.Request{Prompt: p, MaxTokens: 4, Sampling: sample.Config{LogitBias: bias}}, nil)
	if d := cmp.Diff(free.tokens, none.tokens); d != "" {
		t.Errorf("a mask allowing nothing changed the tokens (-free +masked):\n%s", d)
	}
	if d := cmp.Diff(free.tokens, again.tokens); d != "" {
		t.Errorf("after a masked request the same prompt samples differently (-before +after):\n%s", d)
	}
}

// TestPromptLogits: the logits reported for each prompt position are the
// ones stepping through the prompt token by token gives, across ubatch
// boundaries, and a warm sequence is not reused for them.
func TestPromptLogits(t *testing.T) {
	e := newEngine(t, engine.Options{UBatch: 3})
	prompt := []int32{1, 20, 30, 40, 50, 60, 70, 80}
	ref := engine.NewRunner(e.Model(), engine.Step, 1)
	ref.SetContext(e.Context())
	var want [][]float32
	for _, tok := range prompt[:len(prompt)-1] {
		l, err := ref.Decode(tok)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, l)
	}
	// Warm the sequence with the same prompt: it must still be evaluated.
	if _, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 1}, func(engine.Piece) error { return nil }); err != nil {
		t.Fatal(err)
	}
	got := map[int][]float32{}
	res, err := e.Generate(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 1,
		PromptLogits: func(i int, l []float32) { got[i] = slices.Clone(l) }}, func(engine.Piece) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.ReusedTokens != 0 || len(got) != len(prompt)-1 {
		t.Fatalf("reused %d, got %d positions, want 0 and %d", res.ReusedTokens, len(got), len(prompt)-1)
	}
	for i := 1; i < len(prompt); i++ {
		w, g := want[i-1], got[i]
		for k := range w {
			if d := math.Abs(float64(w[k] - g[k])); d > 1e-3*(1+math.Abs(float64(w[k]))) {
				t.Fatalf("position %d logit %d: %g, stepping gives %g", i, k, g[k], w[k])
			}
		}
	}
}
