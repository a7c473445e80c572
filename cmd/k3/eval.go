package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/runtime"
)

func init() {
	register(&command{
		name:    "eval",
		summary: "evaluate a token sequence and print logits per position as JSON lines",
		run:     runEval,
	})
}

// evalLine is one prompt position of k3 eval's output.
type evalLine struct {
	Pos    int        `json:"pos"`
	Token  int32      `json:"token"`
	Argmax int32      `json:"argmax"`
	Top    []topEntry `json:"top,omitempty"`
	Logits []float32  `json:"logits,omitempty"`
}

func parseTokens(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--tokens is empty")
	}
	var out []int32
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %q is not a token id", f)
		}
		out = append(out, int32(v))
	}
	return out, nil
}

// topEntry is a [token, logit] pair, the logit printed at float32 precision.
type topEntry struct {
	ID    int
	Logit float32
}

func (e topEntry) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, "[%d,%s]", e.ID, strconv.FormatFloat(float64(e.Logit), 'g', -1, 32)), nil
}

// topK returns the k largest logits, best first (the lower id on ties).
func topK(logits []float32, k int) []topEntry {
	ids := make([]int, len(logits))
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(a, b int) bool { return logits[ids[a]] > logits[ids[b]] })
	k = min(k, len(ids))
	out := make([]topEntry, k)
	for i := 0; i < k; i++ {
		out[i] = topEntry{ids[i], logits[ids[i]]}
	}
	return out
}

func runEval(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("eval", stderr)
	path := fs.String("m", "", "model file (first shard of a split model)")
	fs.StringVar(path, "model", "", "same as -m")
	tokens := fs.String("tokens", "", "comma-separated token ids of the prompt")
	full := fs.Bool("full", false, "print every logit of every position")
	top := fs.Int("top", 0, "print the K largest logits of each position")
	n := fs.Int("n", 0, "then generate N tokens greedily and print them")
	threads := fs.Int("t", 0, "threads (0: one per CPU); like llama.cpp's -t it also decides how decode attention over 512+ cached positions is split")
	fs.IntVar(threads, "threads", 0, "same as -t")
	mode := fs.String("mode", "batch", "batch: the prompt in ubatches; step: one token at a time")
	ubatch := fs.Int("ub", 0, "tokens per ubatch in batch mode; 0: the profile's, else the largest chunk the memory budget allows")
	stage := addStageFlags(fs)
	kf := addKernelsFlags(fs)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *path == "" {
		fmt.Fprintln(stderr, "k3 eval: -m is required")
		return errUsage
	}
	toks, err := parseTokens(*tokens)
	if err != nil {
		fmt.Fprintln(stderr, "k3 eval:", err)
		return errUsage
	}
	md, err := engine.ParseMode(*mode)
	if err != nil {
		fmt.Fprintln(stderr, "k3 eval:", err)
		return errUsage
	}

	prof, err := stage.load(*path)
	if err != nil {
		return err
	}
	o := runtime.Options{Threads: *threads, Context: len(toks) + *n, UBatch: *ubatch, Kernels: kf.settings(prof)}
	rt, err := runtime.Open(context.Background(), *path, prof, runtimeOptions(o, stderr))
	if err != nil {
		return err
	}
	defer rt.Close()
	fmt.Fprintln(stderr, rt.Mode)
	m, kb := rt.Model, rt.Kernels
	r := engine.NewRunner(m, md, rt.UBatch)
	r.SetContext(len(toks) + *n)
	v := m.Params().Vocab

	start := time.Now()
	logits, err := r.Prefill(toks, true)
	if err != nil {
		return err
	}
	prefill := time.Since(start)
	enc := json.NewEncoder(stdout)
	for i, tok := range toks {
		row := logits[i*v : (i+1)*v]
		line := evalLine{Pos: i, Token: tok, Argmax: engine.Argmax(row)}
		if *top > 0 {
			line.Top = topK(row, *top)
		}
		if *full {
			line.Logits = row
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	var atDecode engine.StageStats
	if rt.Staged != nil {
		if atDecode, err = rt.Staged.Stats(); err != nil {
			return err
		}
	}
	var decode time.Duration
	var decoded int
	atDecodeK := kernelsStats(kb)
	if *n > 0 {
		start = time.Now()
		gen, err := r.Greedy(logits[(len(toks)-1)*v:], *n)
		if err != nil {
			return err
		}
		decode = time.Since(start)
		decoded = len(gen) - 1
		if err := enc.Encode(struct {
			Greedy []int32 `json:"greedy"`
		}{gen}); err != nil {
			return err
		}
		slog.Info("eval", "decode_tok_s", float64(len(gen)-1)/decode.Seconds())
	}
	slog.Info("eval", "prompt_tokens", len(toks), "prefill_tok_s", float64(len(toks))/prefill.Seconds(), "mode", *mode)
	if rep := kernelsReport(kb, atDecodeK, decoded); rep != nil {
		slog.Info("eval decode boundary", rep...)
	}
	if rt.Staged != nil {
		end, err := rt.Staged.Stats()
		if err != nil {
			return err
		}
		return printStagerReport(stderr, newStagerReport(end, atDecode, decoded, decode))
	}
	return nil
}
