package engine_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/sample"
)

// TestStopStrings: a stop string that spans two tokens ends generation
// where it begins; no part of it is emitted.
func TestStopStrings(t *testing.T) {
	e := newEngine(t, engine.Options{})
	req := engine.Request{Text: "Hello there", MaxTokens: 40, Sampling: sample.Config{LogitBias: noEOG(e)}}
	var pieces []string
	full := generate(e, context.Background(), req, func(p engine.Piece) error {
		pieces = append(pieces, p.Text)
		return nil
	})
	if full.err != nil {
		t.Fatal(full.err)
	}
	// the last byte of one piece and the first of the next, both non-empty
	var stop string
	for i := 1; i < len(pieces); i++ {
		a, b := pieces[i-1], pieces[i]
		if a != "" && b != "" && strings.TrimSpace(a[len(a)-1:]+b[:1]) != "" {
			stop = a[len(a)-1:] + b[:1]
			break
		}
	}
	if stop == "" {
		t.Fatalf("no token boundary to stop at in %q", pieces)
	}
	cut := strings.Index(full.text, stop)
	for _, tc := range []struct {
		name  string
		stops []string
	}{
		{"across tokens", []string{stop}},
		{"with unmatched ones", []string{"\x00never", stop, stop + "zzz-not-there"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req.Stop = tc.stops
			var emitted []string
			r := generate(e, context.Background(), req, func(p engine.Piece) error {
				emitted = append(emitted, p.Text)
				return nil
			})
			if r.err != nil || r.res.Finish != sample.FinishStop {
				t.Fatalf("%v %+v", r.err, r.res)
			}
			if r.text != full.text[:cut] {
				t.Errorf("emitted %q, want %q (stop %q)", r.text, full.text[:cut], stop)
			}
			for _, p := range emitted {
				if strings.Contains(p, stop) {
					t.Errorf("piece %q contains the stop string", p)
				}
			}
		})
	}
	t.Run("emit asks to stop", func(t *testing.T) {
		req.Stop = nil
		r := generate(e, context.Background(), req, func(p engine.Piece) error {
			return engine.ErrStop
		})
		if r.err != nil || r.res.Finish != sample.FinishStop || r.res.GeneratedTokens != 1 {
			t.Errorf("%v %+v", r.err, r.res)
		}
	})
	t.Run("emit fails", func(t *testing.T) {
		boom := errors.New("client gone")
		r := generate(e, context.Background(), req, func(p engine.Piece) error { return boom })
		if !errors.Is(r.err, boom) || r.res.GeneratedTokens != 1 {
			t.Errorf("%v %+v", r.err, r.res)
		}
	})
}

// TestCancel: cancelling stops generation before the next token.
func TestCancel(t *testing.T) {
	e := newEngine(t, engine.Options{})
	req := engine.Request{Text: "Cancel me", MaxTokens: 50, Sampling: sample.Config{LogitBias: noEOG(e)}}
	ctx, cancel := context.WithCancel(context.Background())
	var n int
	r := generate(e, ctx, req, func(engine.Piece) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if !errors.Is(r.err, context.Canceled) || r.res.GeneratedTokens != 3 {
		t.Errorf("%v %+v", r.err, r.res)
	}
	r = generate(e, ctx, req, nil)
	if !errors.Is(r.err, context.Canceled) || r.res.GeneratedTokens != 0 {
		t.Errorf("cancelled before the start: %v %+v", r.err, r.res)
	}
	// the engine stays usable
	r = generate(e, context.Background(), req, nil)
	if r.err != nil || r.res.GeneratedTokens != 50 {
		t.Errorf("after cancellation: %v %+v", r.err, r.res)
	}
}

// failAfter is a context that reports cancellation from its n+1st Err
// call on, to cancel at a chosen check.
type failAfter struct {
	context.Context
	n int
}

func (c *failAfter) Err() error {
	if c.n--; c.n < 0 {
		return context.Canceled
	}
	return nil
}

// TestCancelPrefill: cancellation between prompt batches keeps the batches
// that completed, and the next request continues from them.
func TestCancelPrefill(t *testing.T) {
	e := newEngine(t, engine.Options{UBatch: 8})
	p := prompt(t, e, "A prompt long enough to take several batches of eight tokens each.")
	if len(p) <= 24 {
		t.Fatalf("prompt of %d tokens", len(p))
	}
	r := generate(e, &failAfter{context.Background(), 2}, engine.Request{Prompt: p, MaxTokens: 4}, nil)
	if !errors.Is(r.err, context.Canceled) || r.res.PrefillTokens != 16 || r.res.GeneratedTokens != 0 {
		t.Errorf("%v %+v", r.err, r.res)
	}
	r = generate(e, context.Background(), engine.Request{Prompt: p, MaxTokens: 4}, nil)
	if r.err != nil || r.res.ReusedTokens != 16 || r.res.PrefillTokens != len(p)-16 {
		t.Errorf("%v %+v", r.err, r.res)
	}
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// fresh runs req on a new engine and returns its tokens and the logits
// after the prompt.
func fresh(t *testing.T, o engine.Options, req engine.Request) ([]int32, []float32) {
	t.Helper()
	e := newEngine(t, o)
	one := req
	one.MaxTokens = 1
	if r := generate(e, context.Background(), one, nil); r.err != nil || r.res.ReusedTokens != 0 {
		t.Fatalf("%v %+v", r.err, r.res)
	}
	logits := engine.LastLogits(e)
	r := generate(e, context.Background(), req, nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.tokens, logits
}

// TestPrefixReuse: a request that extends the sequence, or shares a
// snapshotted prompt, evaluates only the new tokens, and its logits and
// tokens are bit-identical to a fresh engine's.
func TestPrefixReuse(t *testing.T) {
	base := engine.Options{UBatch: 8}
	e := newEngine(t, base)
	bias := noEOG(e)
	p1 := prompt(t, e, "A conversation starts here, and goes on.")
	first := generate(e, context.Background(), engine.Request{Prompt: p1, MaxTokens: 6, Sampling: sample.Config{LogitBias: bias}}, nil)
	if first.err != nil || len(first.tokens) != 6 {
		t.Fatalf("%v %+v", first.err, first.res)
	}
	extra := prompt(t, e, " And then more text.")
	other := first.tokens[0] + 1
	for _, tc := range []struct {
		name      string
		o         engine.Options
		prompt    []int32
		reused    int
		reusedOff int // with snapshots off
	}{
		// the sequence holds p1 and five generated tokens (the sixth was
		// sampled but never evaluated)
		{name: "extends the sequence", prompt: concat(p1, first.tokens, extra), reused: len(p1) + 5, reusedOff: len(p1) + 5},
		{name: "same prompt again", prompt: p1, reused: len(p1)},
		{name: "diverges after the prompt", prompt: concat(p1, []int32{other}, extra), reused: len(p1)},
		{name: "shares part of the prompt", prompt: concat(p1[:len(p1)-2], extra), reused: 0},
		{name: "unrelated", prompt: extra, reused: 0},
	} {
		for _, snaps := range []int{1, -1} {
			o := base
			o.Snapshots = snaps
			e := newEngine(t, o)
			if r := generate(e, context.Background(), engine.Request{Prompt: p1, MaxTokens: 6, Sampling: sample.Config{LogitBias: bias}}, nil); r.err != nil || !slices.Equal(r.tokens, first.tokens) {
				t.Fatalf("%v %v", r.err, r.tokens)
			}
			req := engine.Request{Prompt: tc.prompt, MaxTokens: 1, Sampling: sample.Config{LogitBias: bias}}
			r := generate(e, context.Background(), req, nil)
			want := tc.reused
			if snaps < 0 {
				want = tc.reusedOff
			}
			if r.err != nil || r.res.ReusedTokens != want || r.res.PromptTokens != len(tc.prompt) || r.res.PrefillTokens != len(tc.prompt)-want {
				t.Errorf("%s, snapshots %d: reused %d, want %d (%v)", tc.name, snaps, r.res.ReusedTokens, want, r.err)
			}
			logits := engine.LastLogits(e)
			req.MaxTokens = 8
			r = generate(e, context.Background(), req, nil)
			if r.err != nil || r.res.ReusedTokens != len(tc.prompt) {
				t.Errorf("%s, snapshots %d: repeating reused %d of %d (%v)", tc.name, snaps, r.res.ReusedTokens, len(tc.prompt), r.err)
			}
			wantToks, wantLogits := fresh(t, o, req)
			if !bitsEqual(logits, wantLogits) {
				t.Errorf("%s, snapshots %d: logits after the prompt differ from a fresh run", tc.name, snaps)
			}
			if d := cmp.Diff(wantToks, r.tokens); d != "" {
				t.Errorf("%s, snapshots %d: tokens (-fresh +reused):\n%s", tc.name, snaps, d)
			}
		}
	}
}

func concat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestConcurrentCallers: Generate is safe from several goroutines; each
// call sees a consistent sequence.
func TestConcurrentCallers(t *testing.T) {
	e := newEngine(t, engine.Options{})
	req := engine.Request{Text: "Shared prompt", MaxTokens: 8, Sampling: sample.Config{LogitBias: noEOG(e)}}
	want := generate(e, context.Background(), req, nil)
	var wg sync.WaitGroup
	got := make([]run, 4)
	for i := range got {
		wg.Go(func() { got[i] = generate(e, context.Background(), req, nil) })
	}
	wg.Wait()
	for i, r := range got {
		if r.err != nil || !slices.Equal(r.tokens, want.tokens) {
			t.Errorf("caller %d: %v %v, want %v", i, r.err, r.tokens, want.tokens)
		}
	}
}
