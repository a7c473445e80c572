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
	j, aerr := s.newJob("completion", b, &req.samplingFields, req.Prompt.Text, req.Prompt.Tokens)
	if aerr != nil {
		return aerr
	}
	if aerr := s.constrainText(j, &req.samplingFields); aerr != nil {
		return aerr
	}
	cp, aerr := s.completionProbs(j, &req)
	if aerr != nil {
		return aerr
	}
	resp := completionResponse{ID: newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(),
		Model: s.modelID(b), SystemFingerprint: "k3"}
	stops := sample.NewStopMatcher(j.stops)
	if !j.stream {
		var text []byte
		res, err := s.run(c, b, j, func() error { return nil }, func(p Piece) error {
			cp.token(p.Token)
			out, stopped := stops.Feed(p.Text)
			text = append(text, out...)
			if stopped {
				return ErrStop
			}
			return nil
		})
		if err != nil {
			return quietIfGone(cutShort(err))
		}
		text = append(text, stops.Flush()...)
		fr := string(res.Finish)
		resp.Choices = []completionChoice{{Text: cp.echo + string(text), FinishReason: &fr, Logprobs: cp.all()}}
		resp.Usage, resp.Timings = usageOf(res), timingsOf(res)
		return s.writeJSON(c, resp)
	}
	return s.streamCompletion(c, b, j, stops, resp, cp)
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

func (s *Server) streamCompletion(c echo.Context, b Backend, j *job, stops *sample.StopMatcher, resp completionResponse, cp *cmplProbs) error {
	// chunk carries text and the logprobs of the tokens up to it; the
	// first one starts with the echoed prompt.
	chunk := func(text string, finish *string) completionResponse {
		r := resp
		first := !cp.started
		if first {
			text = cp.echo + text
			cp.started = true
		}
		r.Choices = []completionChoice{{Text: text, FinishReason: finish, Logprobs: cp.unsent(first)}}
		return r
	}
	var w *sse
	res, err := s.run(c, b, j, func() error { w = s.startSSE(c); return nil }, func(p Piece) error {
		cp.token(p.Token)
		out, stopped := stops.Feed(p.Text)
		if out != "" || (!cp.started && cp.echo != "") {
			if err := w.send(chunk(out, nil)); err != nil {
				return err
			}
		}
		if stopped {
			return ErrStop
		}
		return nil
	})
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
	fr := string(res.Finish)
	last := chunk(stops.Flush(), &fr)
	last.Timings = timingsOf(res)
	if cut {
		fr, last.Error = "stop", errCutShort()
	}
	if w.send(last) != nil {
		return nil
	}
	if j.includeUsage {
		u := resp
		u.Choices = []completionChoice{}
		u.Usage = usageOf(res)
		if w.send(u) != nil {
			return nil
		}
	}
	_ = w.raw("data: [DONE]\n\n")
	return nil
}
