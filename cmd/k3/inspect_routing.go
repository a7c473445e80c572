package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/runtime"
)

// routingReport is what `k3 inspect --routing N` prints: the routing
// statistics over N tokens fed one at a time.
type routingReport struct {
	Path   string `json:"path"`
	Tokens int    `json:"tokens"`
	Prompt string `json:"prompt"` // "random (seed S)" or "text"
	moe.RoutingSummary
}

// inspectRouting runs the model at path on the plain mapping over n tokens
// (of text, or random ids), one token at a time, and reports how its
// routers behave: lookahead precision by rank, next-token reuse and
// popularity (moe.RoutingStats).
func inspectRouting(path string, n int, text string, seed uint64, threads int, asJSON bool, stdout, stderr io.Writer) error {
	// The best kernels this CPU has, in this process, as k3 bench runs.
	ks := config.Kernels{Name: "auto", Mode: "inprocess", Float: "exact"}
	rt, err := runtime.Open(context.Background(), path, nil, runtime.Options{Mapped: true, Threads: threads, Context: n + 1, Kernels: ks})
	if err != nil {
		return err
	}
	defer rt.Close()
	tr, ok := rt.Model.(interface{ Experts() *moe.Runner })
	if !ok || tr.Experts() == nil {
		return fmt.Errorf("inspect --routing: architecture %q has no expert runner to trace", rt.Arch.Name)
	}
	stats := moe.NewRoutingStats()
	tr.Experts().Trace = stats
	var toks []int32
	prompt := fmt.Sprintf("random (seed %d)", seed)
	if text != "" {
		tok, err := rt.Tokenizer()
		if err != nil {
			return err
		}
		if toks, err = tok.Tokenize(text, true, true); err != nil {
			return err
		}
		toks, prompt = toks[:min(n, len(toks))], "text"
	} else {
		rng := rand.New(rand.NewPCG(seed, 0x6b3))
		for range n {
			toks = append(toks, int32(rng.IntN(rt.Model.Params().Vocab)))
		}
	}
	r := engine.NewRunner(rt.Model, engine.Step, 1)
	r.SetContext(len(toks) + 1)
	if _, err := r.Prefill(toks, false); err != nil {
		return err
	}
	rep := routingReport{Path: path, Tokens: len(toks), Prompt: prompt, RoutingSummary: stats.Summary()}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "routing of %s over %d tokens (%s), one at a time\n", path, rep.Tokens, rep.Prompt)
	fmt.Fprintf(stdout, "lookahead precision (guess from the layer before, %d scored):", rep.Guesses)
	for _, k := range []int{1, 2, 4, 6, 8, 16, 32} {
		if k <= len(rep.PrecisionAt) {
			fmt.Fprintf(stdout, " top-%d %.3f", k, rep.PrecisionAt[k-1])
		}
	}
	fmt.Fprintf(stdout, "\nnext-token expert reuse %.3f\n", rep.Reuse)
	fmt.Fprintf(stdout, "popularity: CV %.3f (uniform random %.3f), busiest expert %.2fx the mean\n", rep.PopularityCV, rep.UniformCV, rep.PopularityMax)
	return nil
}
