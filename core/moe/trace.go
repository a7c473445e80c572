package moe

import (
	"math"
	"slices"
	"sync"
)

// RoutingStats measures, one token at a time, the routing statistics that
// expert caching and lookahead live on: how precise a layer's guess made
// from the previous layer's output is at each rank, how many experts a
// layer reuses from the token before, and how evenly the experts are used.
// A Runner with Trace set feeds it (and guesses every MoE layer one ahead,
// with or without an expert source). Safe for concurrent use.
type RoutingStats struct {
	mu      sync.Mutex
	guess   map[int][]int32 // layer -> ranked guess awaiting its routing
	last    map[int][]int32 // layer -> the previous token's choice
	counts  map[int][]int64 // layer -> uses of each expert
	rankHit []int64         // guesses right at each rank
	guesses int64           // guesses scored
	reused  int64           // experts chosen by the token before too
	chosen  int64           // experts chosen with a token before
}

// NewRoutingStats returns empty statistics.
func NewRoutingStats() *RoutingStats {
	return &RoutingStats{guess: map[int][]int32{}, last: map[int][]int32{}, counts: map[int][]int64{}}
}

// Guess records layer's ranked guess for the next token to route it.
func (s *RoutingStats) Guess(layer int, ranked []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.guess[layer] = slices.Clone(ranked)
}

// Chosen records the experts the router chose for one token at layer,
// and scores the layer's guess and the reuse of the token before.
func (s *RoutingStats) Chosen(layer, experts int, chosen []int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.counts[layer]
	if c == nil {
		c = make([]int64, experts)
		s.counts[layer] = c
	}
	for _, e := range chosen {
		c[e]++
	}
	if g, ok := s.guess[layer]; ok {
		delete(s.guess, layer)
		for len(s.rankHit) < len(g) {
			s.rankHit = append(s.rankHit, 0)
		}
		for r, e := range g {
			if slices.Contains(chosen, e) {
				s.rankHit[r]++
			}
		}
		s.guesses++
	}
	if prev, ok := s.last[layer]; ok {
		for _, e := range chosen {
			if slices.Contains(prev, e) {
				s.reused++
			}
		}
		s.chosen += int64(len(chosen))
	}
	s.last[layer] = slices.Clone(chosen)
}

// RoutingSummary is what RoutingStats measured.
type RoutingSummary struct {
	// Guesses is how many layer guesses were scored; PrecisionAt[k-1] the
	// share of the top k guessed experts that the router then chose.
	Guesses     int64     `json:"guesses"`
	PrecisionAt []float64 `json:"precision_at"`
	// Reuse is the share of a token's experts the token before chose too
	// (same layer).
	Reuse float64 `json:"next_token_reuse"`
	// PopularityCV is the coefficient of variation of the experts' use
	// counts (mean over layers; 0 is perfectly even), and PopularityMax
	// the most used expert's count over the mean.
	PopularityCV  float64 `json:"popularity_cv"`
	PopularityMax float64 `json:"popularity_max_over_mean"`
	// UniformCV is the CV the same number of uniformly random choices
	// would show, to compare PopularityCV with.
	UniformCV float64 `json:"uniform_cv"`
}

// Summary computes the statistics so far.
func (s *RoutingStats) Summary() RoutingSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := RoutingSummary{Guesses: s.guesses}
	var hit int64
	for k, h := range s.rankHit {
		hit += h
		if s.guesses > 0 {
			out.PrecisionAt = append(out.PrecisionAt, float64(hit)/float64(s.guesses)/float64(k+1))
		}
	}
	if s.chosen > 0 {
		out.Reuse = float64(s.reused) / float64(s.chosen)
	}
	var layers float64
	for _, c := range s.counts {
		var sum, sq float64
		mx := int64(0)
		for _, n := range c {
			sum += float64(n)
			sq += float64(n) * float64(n)
			mx = max(mx, n)
		}
		mean := sum / float64(len(c))
		if mean == 0 {
			continue
		}
		out.PopularityCV += math.Sqrt(max(sq/float64(len(c))-mean*mean, 0)) / mean
		out.PopularityMax += float64(mx) / mean
		// A count drawn with probability 1/E each of sum draws.
		p := 1 / float64(len(c))
		out.UniformCV += math.Sqrt(sum*p*(1-p)) / mean
		layers++
	}
	if layers > 0 {
		out.PopularityCV /= layers
		out.PopularityMax /= layers
		out.UniformCV /= layers
	}
	return out
}
