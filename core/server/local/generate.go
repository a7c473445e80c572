package local

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/sample"
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/tokenizer"
)

// Generate implements server.Backend.
func (b *Backend) Generate(ctx context.Context, req server.GenerateRequest, emit func(server.Piece) error) (res server.GenerateResult, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	res.PromptTokens = len(req.Prompt)
	if len(req.Prompt) == 0 {
		return res, errNoLogits
	}
	if len(req.Prompt)+req.MaxTokens > b.info.ContextLength {
		return res, fmt.Errorf("local: %d prompt + %d new tokens exceed the context of %d", len(req.Prompt), req.MaxTokens, b.info.ContextLength)
	}
	start := time.Now()
	logits, cached, err := b.prefill(ctx, req.Prompt)
	res.CachedTokens = cached
	res.PromptTime = time.Since(start)
	if err != nil {
		return res, err
	}

	start = time.Now()
	defer func() { res.GenTime = time.Since(start) }()
	s := sample.New(req.Sampling)
	for _, t := range req.Prompt {
		s.Accept(t)
	}
	dec := b.tok.NewDecoder(false, req.Special)
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		tok, err := s.Sample(logits)
		if err != nil {
			return res, fmt.Errorf("local: sample: %w", err)
		}
		s.Accept(tok)
		res.GeneratedTokens++
		if b.tok.IsEOG(tok) {
			res.Finish = sample.FinishStop
			return res, flush(dec, emit)
		}
		text, err := dec.Add(tok)
		if err != nil {
			return res, fmt.Errorf("local: token %d: %w", tok, err)
		}
		if err := emit(server.Piece{Token: tok, Text: text}); err != nil {
			if errors.Is(err, server.ErrStop) {
				res.Finish = sample.FinishStop
				return res, nil
			}
			return res, err
		}
		if res.GeneratedTokens >= req.MaxTokens {
			res.Finish = sample.FinishLength
			return res, flush(dec, emit)
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if logits, err = b.decode(tok); err != nil {
			return res, err
		}
	}
}

// flush emits what the decoder still holds (an incomplete UTF-8 tail).
func flush(dec *tokenizer.Decoder, emit func(server.Piece) error) error {
	if rest := dec.Flush(); rest != "" {
		if err := emit(server.Piece{Token: tokenizer.NoToken, Text: rest}); err != nil && !errors.Is(err, server.ErrStop) {
			return err
		}
	}
	return nil
}

// prefill brings the sequence to prompt and returns the logits after it and
// how many of its tokens were already there. The sequence is reused only
// when prompt extends everything it holds: a recurrent state cannot be
// rolled back to a shorter prefix.
func (b *Backend) prefill(ctx context.Context, prompt []int32) ([]float32, int, error) {
	cached := 0
	switch {
	case b.run != nil && slices.Equal(prompt, b.seen) && b.last != nil:
		return b.last, len(prompt), nil
	case b.run != nil && len(b.seen) < len(prompt) && slices.Equal(prompt[:len(b.seen)], b.seen):
		cached = len(b.seen)
	default:
		b.run = engine.NewRunner(b.m, engine.Batch, b.opts.UBatch)
		b.run.SetContext(b.info.ContextLength)
		b.seen, b.last = b.seen[:0], nil
	}
	ub := b.opts.UBatch
	if ub <= 0 {
		ub = engine.DefaultUBatch
	}
	rest := prompt[cached:]
	for len(rest) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, cached, err
		}
		part := rest[:min(ub, len(rest))]
		logits, err := b.run.Prefill(part, false)
		if err != nil {
			b.run = nil // the state may hold part of a batch
			return nil, cached, fmt.Errorf("local: prefill: %w", err)
		}
		b.seen = append(b.seen, part...)
		b.last = logits
		rest = rest[len(part):]
	}
	return b.last, cached, nil
}

func (b *Backend) decode(tok int32) ([]float32, error) {
	logits, err := b.run.Decode(tok)
	if err != nil {
		b.run = nil
		return nil, fmt.Errorf("local: decode: %w", err)
	}
	b.seen = append(b.seen, tok)
	b.last = logits
	return logits, nil
}
