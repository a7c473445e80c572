package sample

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
)

// before ranks candidates: higher logit first, lower id first among equals, so
// every filter is deterministic.
func before(a, b Candidate) bool {
	return a.Logit > b.Logit || (a.Logit == b.Logit && a.ID < b.ID)
}

func sortDesc(c []Candidate) {
	slices.SortFunc(c, func(a, b Candidate) int {
		if before(a, b) {
			return -1
		}
		if before(b, a) {
			return 1
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

func applyBias(c []Candidate, bias map[int32]float32) {
	for id, b := range bias {
		if id >= 0 && int(id) < len(c) {
			c[id].Logit += b // candidates are still in vocabulary order here
		}
	}
}

// applyPenalties follows llama.cpp's penalties sampler: the repetition
// penalty divides a positive logit and multiplies a non-positive one (so it
// always makes the token less likely), then count*frequency + presence is
// subtracted.
func (s *Sampler) applyPenalties(c []Candidate) {
	cfg := s.cfg
	if cfg.PenaltyLastN == 0 || (cfg.RepeatPenalty == 1 && cfg.FrequencyPenalty == 0 && cfg.PresencePenalty == 0) {
		return
	}
	for id, n := range s.counts {
		if id < 0 || int(id) >= len(c) {
			continue
		}
		l := c[id].Logit
		if l <= 0 {
			l *= cfg.RepeatPenalty
		} else {
			l /= cfg.RepeatPenalty
		}
		c[id].Logit = l - float32(n)*cfg.FrequencyPenalty - cfg.PresencePenalty
	}
}

// minHeap holds the k best candidates seen so far with the worst on top.
type minHeap []Candidate

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return before(h[j], h[i]) }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(Candidate)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// topK keeps the k best candidates, sorted, in O(n log k): the vocabulary is
// large and k is small.
func topK(c []Candidate, k int) []Candidate {
	h := make(minHeap, 0, k)
	for _, x := range c {
		if len(h) < k {
			heap.Push(&h, x)
		} else if before(x, h[0]) {
			h[0] = x
			heap.Fix(&h, 0)
		}
	}
	out := c[:len(h)]
	copy(out, h)
	sortDesc(out)
	return out
}

// topP keeps the sorted prefix whose probability first reaches p, and at
// least minKeep candidates.
func topP(c []Candidate, p float32, minKeep int) []Candidate {
	softmax(c)
	var cum float64
	for i := range c {
		cum += c[i].P
		if cum >= float64(p) && i+1 >= minKeep {
			return c[:i+1]
		}
	}
	return c
}

// minP keeps candidates with p >= minP * p_max, i.e. logit >= max + ln(minP),
// and at least minKeep of the best.
func minP(c []Candidate, p float32, minKeep int) []Candidate {
	best := c[argmax(c)].Logit
	threshold := best + float32(math.Log(float64(p)))
	n := 0
	for _, x := range c {
		if x.Logit >= threshold {
			n++
		}
	}
	if keep := max(minKeep, 1); n < keep {
		// Too few pass: keep the best minKeep, as llama.cpp's sorted fallback does.
		sortDesc(c)
		return c[:min(keep, len(c))]
	}
	n = 0
	for _, x := range c {
		if x.Logit >= threshold {
			c[n] = x
			n++
		}
	}
	return c[:n]
}

// argmax is the first candidate with the highest logit.
func argmax(c []Candidate) int {
	best := 0
	for i := 1; i < len(c); i++ {
		if c[i].Logit > c[best].Logit {
			best = i
		}
	}
	return best
}

// softmax fills P from the logits.
func softmax(c []Candidate) {
	m := float64(c[argmax(c)].Logit)
	if math.IsInf(m, -1) {
		for i := range c {
			c[i].P = 1 / float64(len(c)) // everything banned: no preference left
		}
		return
	}
	var sum float64
	for i := range c {
		c[i].P = math.Exp(float64(c[i].Logit) - m)
		sum += c[i].P
	}
	for i := range c {
		c[i].P /= sum
	}
}
