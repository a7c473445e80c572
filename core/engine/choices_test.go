package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/sample"
	"github.com/k3-inference/k3/core/tokenizer"
)

// generateN runs reqs as the choices of one request.
func generateN(e *engine.Engine, reqs []engine.Request) ([]run, error) {
	runs := make([]run, len(reqs))
	emits := make([]func(engine.Piece) error, len(reqs))
	for i := range reqs {
		emits[i] = func(p engine.Piece) error {
			if p.Token != tokenizer.NoToken {
				runs[i].tokens = append(runs[i].tokens, p.Token)
			}
			runs[i].text += p.Text
			return nil
		}
	}
	res, err := e.GenerateN(context.Background(), reqs, emits)
	for i := range runs {
		runs[i].res = res[i]
	}
	return runs, err
}

// TestGenerateN: three choices of one prompt prefill it once, on three
// slots, and each gets the tokens its sampler (seed s+i) gets running
// alone on a fresh engine; greedy choices are all the greedy reply; their
// decode steps run batched.
func TestGenerateN(t *testing.T) {
	e := newEngine(t, engine.Options{Slots: 4, UBatch: 8})
	p := prompt(t, e, system+"Tell me three things.")
	const seed = 42
	for _, temp := range []float32{0, 1} {
		reqs := make([]engine.Request, 3)
		for i := range reqs {
			reqs[i] = engine.Request{Prompt: p, MaxTokens: 10, Sampling: sample.Config{Temperature: temp, Seed: seed + uint64(i), LogitBias: noEOG(e)}}
		}
		stepsBefore, rowsBefore := engine.StepStats(e)
		got, err := generateN(e, reqs)
		if err != nil {
			t.Fatal(err)
		}
		steps, rows := engine.StepStats(e)
		t.Logf("temperature %g: %d decode steps ran %d sequences", temp, steps-stepsBefore, rows-rowsBefore)
		slotsUsed := map[int]bool{}
		prefilled := 0
		for i, r := range got {
			slotsUsed[r.res.Slot] = true
			prefilled += r.res.PrefillTokens
			if r.res.PromptTokens != len(p) || r.res.GeneratedTokens != 10 || r.res.Finish != sample.FinishLength {
				t.Errorf("temperature %g, choice %d: %+v", temp, i, r.res)
			}
			alone := newEngine(t, engine.Options{UBatch: 8})
			want := generate(alone, context.Background(), reqs[i], nil)
			if want.err != nil {
				t.Fatal(want.err)
			}
			if d := cmp.Diff(want.tokens, r.tokens); d != "" {
				t.Errorf("temperature %g, choice %d (-alone +choice):\n%s", temp, i, d)
			}
		}
		if len(slotsUsed) != 3 {
			t.Errorf("temperature %g: choices ran on slots %v", temp, slotsUsed)
		}
		if prefilled > len(p) {
			t.Errorf("temperature %g: %d prompt tokens prefilled for a prompt of %d", temp, prefilled, len(p))
		}
		if temp > 0 && cmp.Equal(got[0].tokens, got[1].tokens) && cmp.Equal(got[1].tokens, got[2].tokens) {
			t.Errorf("three sampled choices with seeds %d.. are identical: %v", seed, got[0].tokens)
		}
		if temp > 0 && (rows-rowsBefore) <= (steps-stepsBefore) {
			t.Errorf("the choices' decode steps did not batch: %d steps, %d sequences", steps-stepsBefore, rows-rowsBefore)
		}
	}
}

// TestGenerateNErrors: more choices than slots, and choices with
// different prompts, are refused before anything runs.
func TestGenerateNErrors(t *testing.T) {
	e := newEngine(t, engine.Options{Slots: 2})
	p := prompt(t, e, "Hello")
	_, err := generateN(e, []engine.Request{{Prompt: p}, {Prompt: p}, {Prompt: p}})
	if !errors.Is(err, engine.ErrTooManyChoices) {
		t.Errorf("3 choices on 2 slots: %v", err)
	}
	if _, err := generateN(e, []engine.Request{{Prompt: p}, {Prompt: p[:1]}}); err == nil {
		t.Error("choices with different prompts were accepted")
	}
}

// TestGenerateNWithOthers: multi-choice requests and single ones at once
// on too few slots for all of them never deadlock (each request gathers
// its slots at once) and every one gets its alone tokens.
func TestGenerateNWithOthers(t *testing.T) {
	e := newEngine(t, engine.Options{Slots: 3})
	alone := newEngine(t, engine.Options{})
	texts := []string{"One two three", "Four five", "Six seven eight nine"}
	want := make([][]int32, len(texts))
	for i, text := range texts {
		r := generate(alone, context.Background(), engine.Request{Text: text, MaxTokens: 6, Sampling: sample.Config{LogitBias: noEOG(alone)}}, nil)
		if r.err != nil {
			t.Fatal(r.err)
		}
		want[i] = r.tokens
	}
	var wg sync.WaitGroup
	for round := range 2 {
		for i, text := range texts {
			wg.Go(func() {
				n := 1 + (i+round)%3
				reqs := make([]engine.Request, n)
				for k := range reqs {
					reqs[k] = engine.Request{Text: text, MaxTokens: 6, Sampling: sample.Config{LogitBias: noEOG(e)}}
				}
				got, err := generateN(e, reqs)
				if err != nil {
					t.Error(err)
					return
				}
				for k, r := range got {
					if d := cmp.Diff(want[i], r.tokens); d != "" {
						t.Errorf("%q, choice %d of %d (-alone +got):\n%s", text, k, n, d)
					}
				}
			})
		}
	}
	wg.Wait()
}
