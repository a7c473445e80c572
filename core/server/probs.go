package server

import (
	"math"
	"sort"
	"unicode/utf8"
)

// tokenProb is one entry of llama-server's completion_probabilities
// (completion_token_output::probs_vector_to_json, pre-sampling form).
type tokenProb struct {
	ID          int32       `json:"id"`
	Token       string      `json:"token"`
	Bytes       []int       `json:"bytes"`
	Logprob     float64     `json:"logprob"`
	TopLogprobs []tokenProb `json:"top_logprobs,omitempty"`
}

// probRecorder watches each step's logits through the engine's mask hook
// (changing nothing) and keeps the softmax of the last step, so that the
// token emitted next can be given its probability and the n most likely
// alternatives, as llama-server's n_probs does (softmax of the raw
// logits, before temperature and the samplers).
type probRecorder struct {
	n     int
	texts []string
	probs []float32
	top   []int32
}

func (r *probRecorder) observe(_ []int32, logits []float32) {
	r.probs = r.probs[:0]
	mx := float32(math.Inf(-1))
	for _, l := range logits {
		mx = max(mx, l)
	}
	var sum float64
	for _, l := range logits {
		p := float32(math.Exp(float64(l - mx)))
		r.probs = append(r.probs, p)
		sum += float64(p)
	}
	for i := range r.probs {
		r.probs[i] = float32(float64(r.probs[i]) / sum)
	}
	r.top = r.top[:0]
	for i := range r.probs {
		r.top = append(r.top, int32(i))
	}
	sort.SliceStable(r.top, func(a, b int) bool { return r.probs[r.top[a]] > r.probs[r.top[b]] })
	r.top = r.top[:min(r.n, len(r.top))]
}

// entry is the completion_probabilities entry of tok, sampled from the
// last observed step.
func (r *probRecorder) entry(tok int32) tokenProb {
	e := r.one(tok)
	e.TopLogprobs = []tokenProb{}
	for _, t := range r.top {
		e.TopLogprobs = append(e.TopLogprobs, r.one(t))
	}
	return e
}

func (r *probRecorder) one(tok int32) tokenProb {
	var text string
	if int(tok) < len(r.texts) {
		text = r.texts[tok]
	}
	b := make([]int, len(text))
	for i := 0; i < len(text); i++ {
		b[i] = int(text[i])
	}
	lp := math.MaxFloat32 * -1 // llama-server's stand-in for log(0), which JSON cannot hold
	if int(tok) < len(r.probs) && r.probs[tok] > 0 {
		lp = math.Log(float64(r.probs[tok]))
	}
	for !utf8.ValidString(text) && len(text) > 0 { // validate_utf8: drop an incomplete tail
		text = text[:len(text)-1]
	}
	return tokenProb{ID: tok, Token: text, Bytes: b, Logprob: lp}
}
