package server_test

import (
	"context"
	"errors"
	"time"

	"github.com/k3-inference/k3/core/sample"
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/server/local"
)

// scriptBackend is the real tiny backend (tokenizer, template, vocabulary)
// whose replies are a fixed text instead of the random model's: the text is
// tokenized with the real tokenizer and emitted token by token, so the
// server's stop strings, reply parser and SSE framing see exactly what a
// model writing that text would produce.
type scriptBackend struct {
	*local.Backend
	reply string
	// eog ends the reply with an end-of-generation token (finish "stop")
	// when the whole text was emitted.
	eog bool
	// prompt, if set, receives the last prompt's text.
	prompt *string
}

func (s scriptBackend) Generate(ctx context.Context, req server.GenerateRequest, emit func(server.Piece) error) (server.GenerateResult, error) {
	res := server.GenerateResult{PromptTokens: len(req.Prompt)}
	if s.prompt != nil {
		text, err := s.Detokenize(req.Prompt)
		if err != nil {
			return res, err
		}
		*s.prompt = text
	}
	start := time.Now()
	defer func() { res.GenTime = time.Since(start) }()
	toks, err := s.Tokenize(s.reply, false, true)
	if err != nil {
		return res, err
	}
	for _, t := range toks {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if res.GeneratedTokens == req.MaxTokens {
			res.Finish = sample.FinishLength
			return res, nil
		}
		res.GeneratedTokens++
		text, err := s.Detokenize([]int32{t})
		if err != nil {
			return res, err
		}
		if err := emit(server.Piece{Token: t, Text: text}); err != nil {
			if errors.Is(err, server.ErrStop) {
				res.Finish = sample.FinishStop
				return res, nil
			}
			return res, err
		}
	}
	res.GeneratedTokens++ // the end-of-generation token
	res.Finish = sample.FinishStop
	if !s.eog {
		res.Finish = sample.FinishLength
	}
	return res, nil
}
