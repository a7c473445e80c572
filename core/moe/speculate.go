package moe

import (
	"slices"
	"sync"
)

// FixedLookahead is implemented by an expert source that wants every
// guess hinted, as many as the router ranks, with no adapting (the
// "fixed" lookahead of a benchmark); otherwise the runner speculates
// adaptively (speculation).
type FixedLookahead interface {
	FixedLookahead() bool
}

// wasteShare is the share of a token's expert reads that wrong guesses may
// add: guesses are hinted in order of router confidence while the expected
// wrong ones among them stay under wasteShare of the experts a token uses,
// so that on routers that predict badly lookahead reads barely more than
// no lookahead, and on routers that predict well it reads ahead as far as
// the hits pay. 3% rather than 5%: the first guess is always read and the
// estimates start from even odds, which measured +3.4-5.1% bytes per token
// over no lookahead at 5% on random routers.
const wasteShare = 0.03

// precisionDecay weighs older outcomes down, so the guess count follows
// the router as the text changes.
const precisionDecay = 0.995

// speculation learns how precise each rank of a one-token guess is (the
// guess for a layer made from an earlier layer's output, scored when the
// layer's router chooses) and says how many of the next guess to hint.
type speculation struct {
	mu      sync.Mutex
	pending map[int][]int32 // layer -> its latest ranked one-token guess
	sent    map[int]int     // layer -> how many of pending were hinted
	tries   []float64       // decayed guesses at each rank
	hits    []float64       // of those, chosen
	many    map[int][]int32 // layer -> the hinted part of its latest many-token guess
}

// rememberMany keeps the hinted part of a many-token guess of layer, to
// compute first when the layer is routed (takeMany).
func (s *speculation) rememberMany(layer int, hinted []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.many == nil {
		s.many = map[int][]int32{}
	}
	s.many[layer] = slices.Clone(hinted)
}

// takeMany returns and forgets layer's many-token guess.
func (s *speculation) takeMany(layer int) []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.many[layer]
	delete(s.many, layer)
	return g
}

// remember keeps the ranked guess for layer, to score when it is routed.
func (s *speculation) remember(layer int, ranked []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = map[int][]int32{}
	}
	s.pending[layer] = slices.Clone(ranked)
}

// hinted records that the first n of layer's pending guess were hinted.
func (s *speculation) hinted(layer, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent == nil {
		s.sent = map[int]int{}
	}
	s.sent[layer] = n
}

// ahead is the part of layer's pending guess that was hinted: the
// experts whose reads started before the layer routed.
func (s *speculation) ahead(layer int) []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.pending[layer]
	return g[:min(len(g), s.sent[layer])]
}

// score counts, rank by rank, which of layer's pending guess the router
// chose.
func (s *speculation) score(layer int, chosen []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	guess, ok := s.pending[layer]
	if !ok {
		return
	}
	delete(s.pending, layer)
	delete(s.sent, layer)
	for len(s.tries) < len(guess) {
		s.tries, s.hits = append(s.tries, 0), append(s.hits, 0)
	}
	for r, e := range guess {
		s.tries[r] = s.tries[r]*precisionDecay + 1
		s.hits[r] *= precisionDecay
		if slices.Contains(chosen, e) {
			s.hits[r]++
		}
	}
}

// precision is rank r's estimated precision: its decayed hit share with
// one hit and one miss assumed (0.5 before any outcome).
func (s *speculation) precision(r int) float64 {
	if r >= len(s.tries) {
		return 0.5
	}
	return (s.hits[r] + 1) / (s.tries[r] + 2)
}

// count is how many of a ranked guess to hint for a token that uses used
// experts: the longest prefix whose expected wrong guesses stay within
// wasteShare of used (at least the first), at most room.
func (s *speculation) count(used, room int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	allow := wasteShare * float64(used)
	waste, n := 0.0, 0
	for n < room {
		waste += 1 - s.precision(n)
		if n > 0 && waste > allow {
			break
		}
		n++
	}
	return n
}

// Precision is the runner's estimate of each rank's guess precision, for
// reports (nil before any guess was scored).
func (r *Runner) Precision() []float64 {
	s := &r.spec
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]float64, len(s.tries))
	for i := range out {
		out[i] = s.precision(i)
	}
	return out
}

// rank orders the experts b chose by their summed weight over the batch,
// most confident first (ties by id).
func rank(b *Batch) []int32 {
	w := make(map[int32]float32, len(b.Experts))
	for i, id := range b.IDs {
		w[id] += b.Weights[i]
	}
	out := slices.Clone(b.Experts)
	slices.SortStableFunc(out, func(x, y int32) int {
		switch {
		case w[x] > w[y]:
			return -1
		case w[x] < w[y]:
			return 1
		}
		return 0
	})
	return out
}
