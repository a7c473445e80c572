package server

import (
	"math"
	"slices"
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
// (changing nothing; it runs before any grammar) and keeps the last one,
// so that the token emitted next can be given its log-probability and
// the n most likely alternatives. Like llama-server's n_probs and
// OpenAI's logprobs, these are the log-softmax of the model's raw logits:
// before temperature, the samplers and any grammar. One implementation
// serves /completion, /v1/completions and /v1/chat/completions.
type probRecorder struct {
	n      int
	texts  []string
	logits []float32
	lse    float64 // log of the sum of exp(logits)
	top    []int32
}

func (r *probRecorder) observe(_ []int32, logits []float32) {
	r.logits = append(r.logits[:0], logits...)
	mx := float32(math.Inf(-1))
	for _, l := range logits {
		mx = max(mx, l)
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l - mx))
	}
	r.lse = float64(mx) + math.Log(sum)
	r.top = topN(r.top[:0], logits, r.n)
}

// topN appends to dst the n largest of x's indexes, largest first, the
// lower index first on ties.
func topN(dst []int32, x []float32, n int) []int32 {
	n = min(n, len(x))
	if n <= 0 {
		return dst
	}
	if n > 64 {
		idx := make([]int32, len(x))
		for i := range idx {
			idx[i] = int32(i)
		}
		slices.SortStableFunc(idx, func(a, b int32) int {
			switch {
			case x[a] > x[b]:
				return -1
			case x[a] < x[b]:
				return 1
			}
			return 0
		})
		return append(dst, idx[:n]...)
	}
	for i, v := range x {
		if len(dst) == n && v <= x[dst[n-1]] {
			continue
		}
		at := len(dst)
		for at > 0 && v > x[dst[at-1]] {
			at--
		}
		if len(dst) < n {
			dst = append(dst, 0)
		}
		copy(dst[at+1:], dst[at:len(dst)-1])
		dst[at] = int32(i)
	}
	return dst
}

// logprob is tok's log-probability at the last observed step; a token
// of probability 0 gets llama-server's stand-in for log(0), which JSON
// cannot hold.
func (r *probRecorder) logprob(tok int32) float64 {
	if tok < 0 || int(tok) >= len(r.logits) || math.IsInf(float64(r.logits[tok]), -1) {
		return -math.MaxFloat32
	}
	return float64(r.logits[tok]) - r.lse
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
	if int(tok) < len(r.texts) && tok >= 0 {
		text = r.texts[tok]
	}
	b := make([]int, len(text))
	for i := 0; i < len(text); i++ {
		b[i] = int(text[i])
	}
	return tokenProb{ID: tok, Token: validUTF8Prefix(text), Bytes: b, Logprob: r.logprob(tok)}
}

// validUTF8Prefix drops an incomplete character at the end (llama-server's
// validate_utf8): a token can end inside one.
func validUTF8Prefix(s string) string {
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// chatLogprobs is OpenAI's choices[].logprobs of a chat completion.
type chatLogprobs struct {
	Content []chatLogprob `json:"content"`
	Refusal any           `json:"refusal"`
}

type chatLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func chatLogprobsOf(entries []tokenProb) *chatLogprobs {
	out := &chatLogprobs{Content: []chatLogprob{}}
	for _, e := range entries {
		c := chatLogprob{Token: e.Token, Logprob: e.Logprob, Bytes: e.Bytes, TopLogprobs: []chatTopLogprob{}}
		for _, t := range e.TopLogprobs {
			c.TopLogprobs = append(c.TopLogprobs, chatTopLogprob{Token: t.Token, Logprob: t.Logprob, Bytes: t.Bytes})
		}
		out.Content = append(out.Content, c)
	}
	return out
}

// completionLogprobs is OpenAI's choices[].logprobs of a (legacy)
// completion: parallel lists, with null for the first prompt token's
// log-probability when the prompt is echoed (nothing predicts it).
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// add appends e, whose text starts at offset in the choice's text; a nil
// e is a token nothing predicted (text given).
func (l *completionLogprobs) add(e *tokenProb, text string, offset int) {
	l.Tokens = append(l.Tokens, text)
	l.TextOffset = append(l.TextOffset, offset)
	if e == nil {
		l.TokenLogprobs = append(l.TokenLogprobs, nil)
		l.TopLogprobs = append(l.TopLogprobs, nil)
		return
	}
	lp := e.Logprob
	l.TokenLogprobs = append(l.TokenLogprobs, &lp)
	top := map[string]float64{}
	for _, t := range e.TopLogprobs {
		if _, dup := top[t.Token]; !dup {
			top[t.Token] = t.Logprob
		}
	}
	l.TopLogprobs = append(l.TopLogprobs, top)
}

func newCompletionLogprobs() *completionLogprobs {
	return &completionLogprobs{Tokens: []string{}, TokenLogprobs: []*float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
}
