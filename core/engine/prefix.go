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

// prefill brings the slot's sequence to prompt and returns the logits
// after it, counting in res the tokens that were already there and those
// it evaluated. With a prefix cache it resumes from the cache's longest
// entry when that beats what the slot holds, and writes into the cache
// only where a later request can resume: the prefix this prompt shares
// with other sequences (where it stops being shared), and the end of the
// slot's previous prompt when this prompt gives that conversation up
// (evict). The end of this prompt stays in the slot (keep): writing every
// prompt's end would copy a whole recurrent state per request (about
// 0.4 GB on Kimi K3) mostly for nothing. With promptLogits (echo) the whole
// prompt is evaluated from an empty sequence, since reused positions have
// no logits, and promptLogits gets each position's. After a failed
// forward pass the sequence is dropped (its state is undefined); after
// cancellation it keeps the prompt batches that completed.
func (s *slot) prefill(ctx context.Context, prompt []int32, promptLogits func(int, []float32), res *Result) ([]float32, error) {
	e := s.e
	var reused int
	s.evict(prompt)
	if promptLogits != nil {
		s.start()
	} else {
		reused = s.reuse(prompt)
		if n := s.resume(prompt, reused); n > reused {
			res.CachedTokens = n
			reused = n
		}
	}
	res.ReusedTokens = reused
	split := 0
	if e.cache != nil && promptLogits == nil {
		if sh := e.shared(s, prompt); sh > reused && sh < len(prompt) && sh-reused >= e.cache.minShared && !e.cache.has(prompt[:sh]) {
			split = sh
		}
	}
	ub := e.o.UBatch
	if ub <= 0 {
		ub = DefaultUBatch
	}
	for len(s.seen) < len(prompt) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		end := min(len(s.seen)+ub, len(prompt))
		if split > len(s.seen) {
			end = min(end, split)
		}
		part := prompt[len(s.seen):end]
		logits, err := e.step.prefill(s.run, part, promptLogits != nil)
		if err != nil {
			s.drop()
			return nil, fmt.Errorf("engine: prefill: %w", err)
		}
		if promptLogits != nil {
			v := len(logits) / len(part)
			at := len(s.seen) // position of part[0]
			for r := range part {
				if at+r+1 < len(prompt) {
					promptLogits(at+r+1, logits[r*v:(r+1)*v])
				}
			}
			logits = slices.Clone(logits[(len(part)-1)*v:]) // not the whole batch's rows
		}
		s.seen = append(s.seen, part...)
		s.last = logits
		res.PrefillTokens += len(part)
		if len(s.seen) == split {
			s.keep()
			s.save()
		}
	}
	s.keep()
	return s.last, nil
}

// evict writes the end of the slot's last prompt (its newest snapshot)
// into the prefix cache when prompt is about to give it up (the slot goes
// to another conversation, or the engine closes: prompt nil), so that the
// conversation's next turn resumes from the cache on whichever slot it
// gets. Prompts shorter than the cache's MinShared are not worth a
// state's copy.
func (s *slot) evict(prompt []int32) {
	c := s.e.cache
	if c == nil || s.run == nil || len(s.snaps) == 0 {
		return
	}
	p := s.snaps[len(s.snaps)-1]
	pos := p.snap.Pos()
	if pos <= commonPrefix(s.seen, prompt) || pos < c.minShared || p.logits == nil || pos > len(s.seen) || c.has(s.seen[:pos]) {
		return
	}
	if err := s.run.S.Restore(p.snap); err != nil {
		return
	}
	s.seen, s.last = s.seen[:pos], p.logits
	s.save()
}

// reuse positions the sequence at the longest prefix of prompt it can
// reach without evaluating anything and returns its length: everything it
// holds when prompt extends that, else the longest snapshot within the
// shared prefix, else an empty sequence. A recurrent state cannot be
// rewound, so there is no other way back.
func (s *slot) reuse(prompt []int32) int {
	if s.run == nil {
		s.start()
		return 0
	}
	n := len(s.seen)
	if n <= len(prompt) && slices.Equal(prompt[:n], s.seen) && (n < len(prompt) || s.last != nil) {
		return n
	}
	common := commonPrefix(s.seen, prompt)
	for i := len(s.snaps) - 1; i >= 0; i-- {
		p := s.snaps[i]
		pos := p.snap.Pos()
		if pos == 0 || pos > common || (pos == len(prompt) && p.logits == nil) {
			continue
		}
		if s.run.S.Restore(p.snap) != nil {
			break
		}
		s.seen, s.last = s.seen[:pos], p.logits
		s.snaps = s.snaps[:i+1] // later snapshots' cache rows will be overwritten
		return pos
	}
	s.start()
	return 0
}

// resume loads the prefix cache's longest entry for prompt into the slot
// when it covers more than the reused tokens, and returns the tokens the
// sequence then holds (reused when it did not load).
func (s *slot) resume(prompt []int32, reused int) int {
	c := s.e.cache
	if c == nil {
		return reused
	}
	ent := c.lookup(prompt, reused)
	if ent == nil {
		return reused
	}
	if err := s.run.S.(model.Portable).UnmarshalBinary(ent.state); err != nil {
		c.warn("prefix cache: an entry does not load into this model's state; dropped", "tokens", len(ent.tokens), "err", err)
		c.remove(ent.ent)
		s.start() // unchanged on error, but be certain of it
		return 0
	}
	s.seen = append(s.seen[:0], ent.tokens...)
	s.last = ent.logits
	s.snaps = nil // their cache rows are gone
	return len(ent.tokens)
}

// keep snapshots the sequence, dropping the oldest snapshot beyond the
// configured number.
func (s *slot) keep() {
	o := s.e.o
	if o.Snapshots < 0 || len(s.seen) == 0 {
		return
	}
	if k := len(s.snaps); k > 0 && s.snaps[k-1].snap.Pos() == len(s.seen) {
		return
	}
	s.snaps = append(s.snaps, prefix{snap: s.run.S.Snapshot(), logits: s.last})
	if len(s.snaps) > o.Snapshots {
		s.snaps = slices.Delete(s.snaps, 0, 1)
	}
}

// save puts the sequence as it stands into the prefix cache.
func (s *slot) save() {
	c := s.e.cache
	if c == nil || len(s.seen) == 0 || c.has(s.seen) {
		return
	}
	b, err := s.run.S.(model.Portable).AppendBinary(nil)
	if err != nil {
		c.warn("prefix cache: cannot save the sequence", "err", err)
		return
	}
	c.add(slices.Clone(s.seen), s.last, b)
}

func (s *slot) decode(tok int32) ([]float32, error) {
	logits, err := s.e.step.decode(s.run.S, tok)
	if err != nil {
		s.drop()
		return nil, fmt.Errorf("engine: decode: %w", err)
	}
	s.seen = append(s.seen, tok)
	s.last = logits
	return logits, nil
}

// copyFrom makes the slot's sequence src's (state: src's state in binary
// form), for the choices of one request that share its prompt. Its own
// snapshots go: their rows of the caches are overwritten.
func (s *slot) copyFrom(src *slot, state []byte) error {
	if s.run == nil {
		s.start()
	}
	if err := s.run.S.(model.Portable).UnmarshalBinary(state); err != nil {
		s.drop()
		return fmt.Errorf("engine: copy the prompt's state: %w", err)
	}
	s.seen = append(s.seen[:0], src.seen...)
	s.last, s.snaps = src.last, nil
	return nil
}

// start begins an empty sequence.
func (s *slot) start() {
	s.run = NewRunner(s.e.m, s.e.o.Mode, s.e.o.UBatch)
	s.run.SetContext(s.e.ctxLen)
	s.seen, s.last, s.snaps = nil, nil, nil
}

// drop forgets the sequence; the next request starts a new one.
func (s *slot) drop() {
	s.run, s.seen, s.last, s.snaps = nil, nil, nil, nil
}
