package server

import (
	"errors"
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
	resp := completionResponse{ID: newID("cmpl-"), Object: "text_completion", Created: time.Now().Unix(),
		Model: s.modelID(b), SystemFingerprint: "k3"}
	stops := sample.NewStopMatcher(j.stops)
	if !j.stream {
		var text []byte
		res, err := s.run(c, b, j, func() error { return nil }, func(p Piece) error {
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
		resp.Choices = []completionChoice{{Text: string(text), FinishReason: &fr}}
		resp.Usage, resp.Timings = usageOf(res), timingsOf(res)
		return s.writeJSON(c, resp)
	}
	return s.streamCompletion(c, b, j, stops, resp)
}

func (s *Server) streamCompletion(c echo.Context, b Backend, j *job, stops *sample.StopMatcher, resp completionResponse) error {
	chunk := func(text string, finish *string) completionResponse {
		r := resp
		r.Choices = []completionChoice{{Text: text, FinishReason: finish}}
		return r
	}
	var w *sse
	res, err := s.run(c, b, j, func() error { w = s.startSSE(c); return nil }, func(p Piece) error {
		out, stopped := stops.Feed(p.Text)
		if out != "" {
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
