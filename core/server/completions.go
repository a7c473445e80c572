package server

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/k3-inference/k3/core/sample"
)

type completionChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usage             `json:"usage,omitempty"`
	Timings           *timings           `json:"timings,omitempty"`
	// Error marks a stream's last chunk when shutdown cut it short.
	Error *apiError `json:"error,omitempty"`
}

func (s *Server) completions(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	var req completionRequest
	if aerr := s.readJSON(c, &req); aerr != nil {
		return aerr
	}
	if !req.Prompt.isSet {
		return errInvalid("prompt is required")
	}
	n, aerr := s.choiceCount(&req.samplingFields, true)
	if aerr != nil {
		return aerr
	}
	chs, aerr := choiceJobs(n, func() (*cmplChoice, *job, *apiError) {
		j, aerr := s.newJob("completions", b, &req.samplingFields, req.Prompt.Text, req.Prompt.Tokens)
		if aerr != nil {
			return nil, nil, aerr
		}
		if aerr := s.constrainText(j, &req.samplingFields); aerr != nil {
			return nil, nil, aerr
		}
		cp, aerr := s.completionProbs(j, &req)
		if aerr != nil {
			return nil, nil, aerr
		}
		return &cmplChoice{j: j, cp: cp, stops: sample.NewStopMatcher(j.stops)}, j, nil
	})
	if aerr != nil {
		return aerr
	}
	resp := completionResponse{ID: newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(),
		Model: s.modelID(b), SystemFingerprint: "k3"}
	if !chs[0].j.stream {
		texts := make([][]byte, n)
		res, err := s.runN(c, b, jobsOf(chs), func() error { return nil }, choiceEmits(chs, func(i int, out string) error {
			texts[i] = append(texts[i], out...)
			return nil
		}))
		if err != nil {
			return quietIfGone(cutShort(err))
		}
		for i, ch := range chs {
			text := append(texts[i], ch.stops.Flush()...)
			fr := string(res[i].Finish)
			resp.Choices = append(resp.Choices, completionChoice{Index: i, Text: ch.cp.echo + string(text), FinishReason: &fr, Logprobs: ch.cp.all()})
		}
		all := combine(res)
		resp.Usage, resp.Timings = usageOf(all), timingsOf(all)
		return s.writeJSON(c, resp)
	}
	return s.streamCompletion(c, b, chs, resp)
}

// cmplChoice is one choice of a completion request: its job, echo and
// log-probabilities, and stop strings.
type cmplChoice struct {
	j     *job
	cp    *cmplProbs
	stops *sample.StopMatcher
}

func jobsOf(chs []*cmplChoice) []*job {
	jobs := make([]*job, len(chs))
	for i, ch := range chs {
		jobs[i] = ch.j
	}
	return jobs
}

// choiceEmits are the choices' emit functions: each records its token's
// log-probabilities and hands send the text its stop strings let out.
func choiceEmits(chs []*cmplChoice, send func(i int, text string) error) []func(Piece) error {
	emits := make([]func(Piece) error, len(chs))
	for i, ch := range chs {
		emits[i] = func(p Piece) error {
			ch.cp.token(p.Token)
			out, stopped := ch.stops.Feed(p.Text)
			if err := send(i, out); err != nil {
				return err
			}
			if stopped {
				return ErrStop
			}
			return nil
		}
	}
	return emits
}

// cmplProbs is a completion's echo and log-probabilities (OpenAI's
// legacy logprobs: the chosen tokens and their n likeliest alternatives).
type cmplProbs struct {
	rec     *probRecorder // nil: no logprobs wanted
	texts   []string
	echo    string              // the prompt as it comes back (its tokens' texts)
	prompt  []*tokenProb        // echoed prompt entries, by position
	tokens  []int32             // the prompt
	lp      *completionLogprobs // of the generated tokens
	offset  int                 // text offset of the next generated token
	sent    int                 // entries of lp already streamed
	started bool                // the echo was streamed
}

// completionProbs validates logprobs and echo and hooks them into j.
func (s *Server) completionProbs(j *job, req *completionRequest) (*cmplProbs, *apiError) {
	cp := &cmplProbs{texts: s.tokenTexts()}
	if req.Logprobs != nil {
		n := *req.Logprobs
		if n < 0 || n > 20 {
			return nil, errInvalid(fmt.Sprintf("logprobs = %d is outside [0, 20]", n))
		}
		cp.rec = &probRecorder{n: n, texts: cp.texts}
		cp.lp = newCompletionLogprobs()
		j.mask = chainMasks(cp.rec.observe, j.mask) // raw logits, before any grammar
	}
	if !req.Echo {
		return cp, nil
	}
	var echo strings.Builder
	for _, t := range j.prompt {
		echo.WriteString(cp.texts[t])
	}
	cp.echo, cp.tokens = echo.String(), j.prompt
	cp.offset = len(cp.echo)
	if cp.rec != nil {
		cp.prompt = make([]*tokenProb, len(j.prompt))
		pr := &probRecorder{n: cp.rec.n, texts: cp.texts}
		j.promptLogits = func(i int, logits []float32) {
			pr.observe(nil, logits)
			e := pr.entry(j.prompt[i])
			cp.prompt[i] = &e
		}
	}
	return cp, nil
}

// token records a generated token's entry (Token < 0: a flush, no token).
func (cp *cmplProbs) token(t int32) {
	if cp.rec == nil || t < 0 {
		return
	}
	e := cp.rec.entry(t)
	cp.lp.add(&e, cp.texts[t], cp.offset)
	cp.offset += len(cp.texts[t])
}

// promptLogprobs are the echoed prompt's entries (the first one null).
func (cp *cmplProbs) promptLogprobs() *completionLogprobs {
	lp := newCompletionLogprobs()
	off := 0
	for i, e := range cp.prompt {
		t := cp.texts[cp.tokens[i]]
		lp.add(e, t, off)
		off += len(t)
	}
	return lp
}

// all is the choice's logprobs: the echoed prompt's, then the generated.
func (cp *cmplProbs) all() any {
	if cp.rec == nil {
		return nil
	}
	if cp.prompt == nil {
		return cp.lp
	}
	out := cp.promptLogprobs()
	out.Tokens = append(out.Tokens, cp.lp.Tokens...)
	out.TokenLogprobs = append(out.TokenLogprobs, cp.lp.TokenLogprobs...)
	out.TopLogprobs = append(out.TopLogprobs, cp.lp.TopLogprobs...)
	out.TextOffset = append(out.TextOffset, cp.lp.TextOffset...)
	return out
}

// unsent is a stream chunk's logprobs: the generated entries not yet
// streamed (and the prompt's with the echo).
func (cp *cmplProbs) unsent(withPrompt bool) any {
	if cp.rec == nil {
		return nil
	}
	out := newCompletionLogprobs()
	if withPrompt && cp.prompt != nil {
		out = cp.promptLogprobs()
	}
	out.Tokens = append(out.Tokens, cp.lp.Tokens[cp.sent:]...)
	out.TokenLogprobs = append(out.TokenLogprobs, cp.lp.TokenLogprobs[cp.sent:]...)
	out.TopLogprobs = append(out.TopLogprobs, cp.lp.TopLogprobs[cp.sent:]...)
	out.TextOffset = append(out.TextOffset, cp.lp.TextOffset[cp.sent:]...)
	cp.sent = len(cp.lp.Tokens)
	return out
}

func (s *Server) streamCompletion(c echo.Context, b Backend, chs []*cmplChoice, resp completionResponse) error {
	// chunk carries choice i's text and the logprobs of its tokens up to
	// it; its first one starts with the echoed prompt.
	chunk := func(i int, text string, finish *string) completionResponse {
		cp := chs[i].cp
		r := resp
		first := !cp.started
		if first {
			text = cp.echo + text
			cp.started = true
		}
		r.Choices = []completionChoice{{Index: i, Text: text, FinishReason: finish, Logprobs: cp.unsent(first)}}
		return r
	}
	var w *sse
	res, err := s.runN(c, b, jobsOf(chs), func() error { w = s.startSSE(c); return nil }, choiceEmits(chs, func(i int, out string) error {
		if out != "" || (!chs[i].cp.started && chs[i].cp.echo != "") {
			return w.send(chunk(i, out, nil))
		}
		return nil
	}))
	if w == nil {
		return quietIfGone(err)
	}
	cut := errors.Is(err, errInterrupted)
	if err != nil && !cut {
		if !errors.Is(err, errClientGone) {
			w.sendError(s.publicError(c, err))
		}
		return nil
	}
	for i, ch := range chs {
		fr := string(res[i].Finish)
		last := chunk(i, ch.stops.Flush(), &fr)
		if i == len(chs)-1 {
			last.Timings = timingsOf(combine(res))
		}
		if cut {
			fr, last.Error = "stop", errCutShort()
		}
		if w.send(last) != nil {
			return nil
		}
	}
	if chs[0].j.includeUsage {
		u := resp
		u.Choices = []completionChoice{}
		u.Usage = usageOf(combine(res))
		if w.send(u) != nil {
			return nil
		}
	}
	_ = w.raw("data: [DONE]\n\n")
	return nil
}
