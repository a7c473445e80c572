package engine

import (
	"context"
	"fmt"
	"slices"

	"github.com/k3-inference/k3/core/model"
)

// prefix is a snapshot of the sequence at the end of an earlier prompt,
// with the logits that prompt ended on.
type prefix struct {
	snap   model.Snapshot
	logits []float32
}

// prefill brings the sequence to prompt and returns the logits after it,
// counting in res the tokens that were already there and those it
// evaluated. After a failed forward pass the sequence is dropped (its
// state is undefined); after cancellation it keeps the prompt batches that
// completed.
func (e *Engine) prefill(ctx context.Context, prompt []int32, promptLogits func(int, []float32), res *Result) ([]float32, error) {
	var reused int
	if promptLogits != nil {
		e.start()
	} else {
		reused = e.reuse(prompt)
	}
	res.ReusedTokens = reused
	ub := e.o.UBatch
	if ub <= 0 {
		ub = DefaultUBatch
	}
	for rest := prompt[reused:]; len(rest) > 0; {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		part := rest[:min(ub, len(rest))]
		logits, err := e.run.Prefill(part, promptLogits != nil)
		if err != nil {
			e.drop()
			return nil, fmt.Errorf("engine: prefill: %w", err)
		}
		if promptLogits != nil {
			v := len(logits) / len(part)
			at := len(e.seen) // position of part[0]
			for r := range part {
				if at+r+1 < len(prompt) {
					promptLogits(at+r+1, logits[r*v:(r+1)*v])
				}
			}
			logits = slices.Clone(logits[(len(part)-1)*v:]) // not the whole batch's rows
		}
		e.seen = append(e.seen, part...)
		e.last = logits
		res.PrefillTokens += len(part)
		rest = rest[len(part):]
	}
	e.keep()
	return e.last, nil
}

// reuse positions the sequence at the longest prefix of prompt it can
// reach without evaluating anything and returns its length: everything it
// holds when prompt extends that, else the longest snapshot within the
// shared prefix, else an empty sequence. A recurrent state cannot be
// rewound, so there is no other way back.
func (e *Engine) reuse(prompt []int32) int {
	if e.run == nil {
		e.start()
		return 0
	}
	n := len(e.seen)
	if n <= len(prompt) && slices.Equal(prompt[:n], e.seen) && (n < len(prompt) || e.last != nil) {
		return n
	}
	common := 0
	for common < min(n, len(prompt)) && prompt[common] == e.seen[common] {
		common++
	}
	for i := len(e.snaps) - 1; i >= 0; i-- {
		p := e.snaps[i]
		pos := p.snap.Pos()
		if pos == 0 || pos > common || (pos == len(prompt) && p.logits == nil) {
			continue
		}
		if e.run.S.Restore(p.snap) != nil {
			break
		}
		e.seen, e.last = e.seen[:pos], p.logits
		e.snaps = e.snaps[:i+1] // later snapshots' cache rows will be overwritten
		return pos
	}
	e.start()
	return 0
}

// keep snapshots the sequence at the end of a prompt, dropping the oldest
// snapshot beyond the configured number.
func (e *Engine) keep() {
	if e.o.Snapshots < 0 || len(e.seen) == 0 {
		return
	}
	if k := len(e.snaps); k > 0 && e.snaps[k-1].snap.Pos() == len(e.seen) {
		return
	}
	e.snaps = append(e.snaps, prefix{snap: e.run.S.Snapshot(), logits: e.last})
	if len(e.snaps) > e.o.Snapshots {
		e.snaps = slices.Delete(e.snaps, 0, 1)
	}
}

func (e *Engine) decode(tok int32) ([]float32, error) {
	logits, err := e.run.Decode(tok)
	if err != nil {
		e.drop()
		return nil, fmt.Errorf("engine: decode: %w", err)
	}
	e.seen = append(e.seen, tok)
	e.last = logits
	return logits, nil
}

// start begins an empty sequence.
func (e *Engine) start() {
	e.run = NewRunner(e.m, e.o.Mode, e.o.UBatch)
	e.run.SetContext(e.ctxLen)
	e.seen, e.last, e.snaps = nil, nil, nil
}

// drop forgets the sequence; the next request starts a new one.
func (e *Engine) drop() {
	e.run, e.seen, e.last, e.snaps = nil, nil, nil, nil
}
