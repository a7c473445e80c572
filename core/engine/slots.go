package engine

import (
	"context"
	"slices"
)

// slot is one of the engine's sequences: its state, the tokens it holds
// and the snapshots taken at the ends of earlier prompts. While a request
// runs on it, only that request's goroutine touches run, seen, last and
// snaps; busy, used and held belong to Engine.mu.
type slot struct {
	id int
	e  *Engine

	run   *Runner
	seen  []int32   // tokens the sequence holds
	last  []float32 // logits after the last of them (nil when unknown)
	snaps []prefix  // increasing positions, each a prefix of seen

	busy   bool
	used   uint64  // Engine.tick when last acquired: least recently used goes first
	held   []int32 // a copy of seen as the last request left it
	prompt int     // the length of the last prompt it ran
}

// SlotInfo is what /slots reports of a slot.
type SlotInfo struct {
	ID         int
	Context    int  // tokens the slot's sequence may hold
	Processing bool // a request runs on it
	Tokens     int  // tokens its sequence holds (as the last request left it)
}

// SlotInfo reports every slot.
func (e *Engine) SlotInfo() []SlotInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]SlotInfo, len(e.slots))
	for i, s := range e.slots {
		out[i] = SlotInfo{ID: s.id, Context: e.ctxLen, Processing: s.busy, Tokens: len(s.held)}
	}
	return out
}

// acquire waits for n free slots (or ctx) and takes those that suit
// prompt best (choose), all at once: one request gathers its slots at a
// time (admit), so two requests that each need several can never hold
// part of them each and wait for the rest forever.
func (e *Engine) acquire(ctx context.Context, prompt []int32, n int) ([]*slot, error) {
	select {
	case <-ctx.Done(): // a request cancelled before it starts runs nothing
		return nil, ctx.Err()
	default:
	}
	select {
	case e.admit <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-e.admit }()
	for got := 0; got < n; got++ {
		select {
		case <-e.free:
		case <-ctx.Done():
			for range got {
				e.free <- struct{}{}
			}
			return nil, ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*slot, n)
	for i := range out {
		s := e.choose(prompt)
		s.busy = true
		s.prompt = len(prompt)
		e.tick++
		s.used = e.tick
		out[i] = s
	}
	return out, nil
}

// release hands slots back, recording what each holds for choose and
// SlotInfo.
func (e *Engine) release(sls ...*slot) {
	e.mu.Lock()
	for _, s := range sls {
		s.busy = false
		s.held = append(s.held[:0], s.seen...)
	}
	e.mu.Unlock()
	for range sls {
		e.free <- struct{}{}
	}
}

// choose picks a free slot for prompt (e.mu held; one is free):
//
//  1. the slot whose whole sequence the prompt extends, the longest (the
//     same conversation's next turn: nothing is lost);
//  2. else the slot that restarts from the longest prefix of the prompt
//     through its own snapshots, when that covers the last prompt it ran
//     (the same conversation, its reply re-rendered or regenerated) or
//     beats the shared prefix cache (taking it gives up the conversation
//     it held);
//  3. else the least recently used slot, an empty one first; the prompt
//     then resumes from the prefix cache if it can.
func (e *Engine) choose(prompt []int32) *slot {
	var ext, own, lru *slot
	extLen, ownLen := 0, 0
	cached := e.cache.peek(prompt)
	for _, s := range e.slots {
		if s.busy {
			continue
		}
		if n := len(s.held); n > 0 && n <= len(prompt) && slices.Equal(s.held, prompt[:n]) && n > extLen {
			ext, extLen = s, n
		}
		r := s.ownReuse(prompt)
		if r > 0 && (r >= s.prompt || r > cached) && (r > ownLen || (r == ownLen && s.used < own.used)) {
			own, ownLen = s, r
		}
		if lru == nil || older(s, lru) {
			lru = s
		}
	}
	switch {
	case ext != nil:
		return ext
	case own != nil:
		return own
	}
	return lru
}

// older: an empty slot before one that holds a sequence, then the least
// recently used.
func older(a, b *slot) bool {
	if (len(a.held) == 0) != (len(b.held) == 0) {
		return len(a.held) == 0
	}
	return a.used < b.used
}

// ownReuse is how many tokens of prompt a slot could skip through its own
// snapshots without extending its sequence (held by e.mu: the slot is
// free, so its snapshots are not changing).
func (s *slot) ownReuse(prompt []int32) int {
	common := commonPrefix(s.held, prompt)
	best := 0
	for _, p := range s.snaps {
		pos := p.snap.Pos()
		if pos <= common && (pos < len(prompt) || p.logits != nil) {
			best = max(best, pos)
		}
	}
	return best
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

// shared is the longest prefix of prompt that another slot's sequence or
// a prefix cache entry also starts with: where a snapshot is worth taking,
// since more prompts are likely to share it (a system prompt).
func (e *Engine) shared(self *slot, prompt []int32) int {
	e.mu.Lock()
	n := 0
	for _, s := range e.slots {
		if s != self {
			n = max(n, commonPrefix(s.held, prompt))
		}
	}
	e.mu.Unlock()
	return max(n, e.cache.shared(prompt))
}
