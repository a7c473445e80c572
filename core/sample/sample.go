package sample

import (
	"errors"
	"math"
	"math/rand/v2"
)

// Config selects the samplers. The zero value is greedy decoding with every
// filter off.
type Config struct {
	// Temperature divides the logits; 0 (or less) is greedy: the most likely
	// token after biases and penalties.
	Temperature float32
	// TopK keeps the K most likely tokens; 0 or less keeps all.
	TopK int
	// TopP keeps the smallest set whose probability reaches P; 1 or more keeps all.
	TopP float32
	// MinP keeps tokens at least MinP times as likely as the most likely; 0 keeps all.
	MinP float32
	// MinKeep is the fewest candidates top-p and min-p leave (llama.cpp's min_keep).
	MinKeep int
	// RepeatPenalty divides positive (multiplies negative) logits of tokens
	// seen in the window; 1 (or 0) is off.
	RepeatPenalty float32
	// FrequencyPenalty is subtracted once per occurrence in the window,
	// PresencePenalty once for any occurrence.
	FrequencyPenalty float32
	PresencePenalty  float32
	// PenaltyLastN is the window of last tokens penalties look at; 0 disables
	// penalties, -1 means every accepted token.
	PenaltyLastN int
	// LogitBias is added to a token's logit before anything else; -Inf bans it.
	LogitBias map[int32]float32
	// Seed makes sampling reproducible: the same seed and logits give the same
	// tokens. Callers wanting fresh randomness pass a random seed.
	Seed uint64
}

// Candidate is a token still in the running after the filters, with its
// probability under the final distribution.
type Candidate struct {
	ID    int32
	Logit float32
	P     float64
}

// Sampler turns logits into tokens with llama-server's default chain: logit
// bias, penalties, top-k, top-p, min-p, temperature, then a draw from the
// distribution (llama.cpp's common_sampler with DRY, typical-p, XTC and
// top-n-sigma off). It is not safe for concurrent use; use one per sequence.
type Sampler struct {
	cfg     Config
	rng     *rand.Rand
	history []int32       // penalty window, oldest first
	counts  map[int32]int // occurrences in the window
	cand    []Candidate   // reused between calls
}

// New returns a sampler for cfg.
func New(cfg Config) *Sampler {
	if cfg.RepeatPenalty == 0 {
		cfg.RepeatPenalty = 1
	}
	if cfg.TopP == 0 {
		cfg.TopP = 1
	}
	return &Sampler{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		counts: map[int32]int{},
	}
}

// Reset forgets the penalty history and restarts the random stream.
func (s *Sampler) Reset() {
	s.history = s.history[:0]
	clear(s.counts)
	s.rng = rand.New(rand.NewPCG(s.cfg.Seed, s.cfg.Seed^0x9e3779b97f4a7c15))
}

// Accept records a token for the penalties: the generated ones, and prompt
// tokens too if the caller wants them to count.
func (s *Sampler) Accept(tok int32) {
	if s.cfg.PenaltyLastN == 0 {
		return
	}
	s.history = append(s.history, tok)
	s.counts[tok]++
	if n := s.cfg.PenaltyLastN; n > 0 && len(s.history) > n {
		old := s.history[0]
		s.history = s.history[1:]
		if s.counts[old]--; s.counts[old] == 0 {
			delete(s.counts, old)
		}
	}
}

// ErrNoLogits is returned for an empty logits vector.
var ErrNoLogits = errors.New("sample: empty logits")

// Sample picks the next token. It does not Accept it.
func (s *Sampler) Sample(logits []float32) (int32, error) {
	cand, err := s.filter(logits)
	if err != nil {
		return 0, err
	}
	if len(cand) == 1 {
		return cand[0].ID, nil
	}
	r := s.rng.Float64()
	var run float64
	for _, c := range cand {
		run += c.P
		if run >= r {
			return c.ID, nil
		}
	}
	return cand[len(cand)-1].ID, nil // rounding left run just below r
}

// Candidates returns the tokens the next Sample draws from, with their
// probabilities, most likely first. The slice is reused by the next call.
func (s *Sampler) Candidates(logits []float32) ([]Candidate, error) {
	cand, err := s.filter(logits)
	if err != nil {
		return nil, err
	}
	sortDesc(cand)
	return cand, nil
}

// filter runs the chain up to the draw and fills in P. The draw does not need
// the candidates sorted, so a full vocabulary is only sorted when top-p asks.
func (s *Sampler) filter(logits []float32) ([]Candidate, error) {
	if len(logits) == 0 {
		return nil, ErrNoLogits
	}
	cand := s.cand[:0]
	for i, l := range logits {
		if math.IsNaN(float64(l)) {
			l = float32(math.Inf(-1))
		}
		cand = append(cand, Candidate{ID: int32(i), Logit: l})
	}
	s.cand = cand
	applyBias(cand, s.cfg.LogitBias)
	s.applyPenalties(cand)
	sorted := false
	if s.cfg.TopK > 0 && s.cfg.TopK < len(cand) {
		cand = topK(cand, s.cfg.TopK)
		sorted = true
	}
	if s.cfg.TopP < 1 {
		if !sorted {
			sortDesc(cand)
			sorted = true
		}
		cand = topP(cand, s.cfg.TopP, s.cfg.MinKeep)
	}
	if s.cfg.MinP > 0 {
		cand = minP(cand, s.cfg.MinP, s.cfg.MinKeep)
	}
	if s.cfg.Temperature <= 0 {
		best := argmax(cand)
		cand[0] = Candidate{ID: cand[best].ID, Logit: cand[best].Logit, P: 1}
		return cand[:1], nil
	}
	for i := range cand {
		cand[i].Logit /= s.cfg.Temperature
	}
	softmax(cand)
	return cand, nil
}
