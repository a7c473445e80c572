package engine

import (
	"fmt"

	"github.com/k3-inference/k3/core/model"
)

// Mode is how a prompt is fed to the model.
type Mode int

const (
	// Batch evaluates the prompt in ubatches: every layer sees all of a
	// ubatch's tokens at once and each routed expert is read once per
	// ubatch, as llama.cpp's prompt processing does.
	Batch Mode = iota
	// Step evaluates the prompt one token at a time, as decoding does.
	Step
)

// ParseMode maps "batch" or "step" to a Mode.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "batch":
		return Batch, nil
	case "step":
		return Step, nil
	}
	return 0, fmt.Errorf("engine: unknown mode %q (want batch or step)", s)
}

// DefaultUBatch is llama.cpp's default n_ubatch.
const DefaultUBatch = 512

// Runner drives a model over one sequence.
type Runner struct {
	M      model.Model
	S      model.State
	Mode   Mode
	UBatch int // tokens per forward call in Batch mode; <= 0 means DefaultUBatch
}

// NewRunner starts an empty sequence on m.
func NewRunner(m model.Model, mode Mode, ubatch int) *Runner {
	return &Runner{M: m, S: m.NewState(), Mode: mode, UBatch: ubatch}
}

// SetContext sizes the sequence's context as llama.cpp would for n tokens
// (n_ctx = n rounded up to 256), which fixes how its attention kernels
// split long caches.
func (r *Runner) SetContext(n int) {
	r.S.SetContext((n + 255) / 256 * 256)
}

// Prefill feeds tokens and returns the logits of every position when all
// is set (len(tokens) rows of Vocab), else of the last position only.
func (r *Runner) Prefill(tokens []int32, all bool) ([]float32, error) {
	v := r.M.Params().Vocab
	ub := r.UBatch
	if ub <= 0 {
		ub = DefaultUBatch
	}
	if r.Mode == Step {
		ub = 1
	}
	rows := 1
	if all {
		rows = len(tokens)
	}
	out := make([]float32, rows*v)
	for i := 0; i < len(tokens); i += ub {
		part := tokens[i:min(i+ub, len(tokens))]
		last := i+len(part) == len(tokens)
		switch {
		case all:
			if err := r.M.Forward(r.S, part, true, out[i*v:(i+len(part))*v]); err != nil {
				return nil, err
			}
		case last:
			if err := r.M.Forward(r.S, part, false, out); err != nil {
				return nil, err
			}
		default:
			// Logits of earlier ubatches are not needed; the model still
			// computes the last row of each, which is cheap.
			if err := r.M.Forward(r.S, part, false, out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// Decode feeds one token and returns the logits of its position.
func (r *Runner) Decode(token int32) ([]float32, error) {
	out := make([]float32, r.M.Params().Vocab)
	if err := r.M.Forward(r.S, []int32{token}, false, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Argmax is the index of the largest value, the first on ties (as
// llama.cpp's greedy sampler picks it).
func Argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// Greedy continues from the logits of the last prompt position with n
// argmax tokens.
func (r *Runner) Greedy(last []float32, n int) ([]int32, error) {
	var out []int32
	for len(out) < n {
		tok := Argmax(last)
		out = append(out, tok)
		if len(out) == n {
			break
		}
		var err error
		if last, err = r.Decode(tok); err != nil {
			return out, err
		}
	}
	return out, nil
}
