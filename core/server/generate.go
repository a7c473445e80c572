package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/k3-inference/k3/core/sample"
)

// Sampling defaults are llama-server's.
const (
	defaultTemperature = 0.8
	defaultTopK        = 40
	defaultTopP        = 0.95
	defaultMinP        = 0.05
	defaultRepeatLastN = 64
)

// job is one validated generation.
type job struct {
	route        string // for logs
	prompt       []int32
	sampling     sample.Config
	maxTokens    int
	stops        []string
	ignoreEOS    bool
	special      bool
	mask         func(generated []int32, logits []float32)
	promptLogits func(i int, logits []float32)
	stream       bool
	includeUsage bool
}

// samplingConfig validates the sampling fields against the model.
func samplingConfig(f *samplingFields, info ModelInfo) (sample.Config, *apiError) {
	vocab := info.Vocab
	cfg := sample.Config{
		Temperature: defaultTemperature, TopK: defaultTopK, TopP: defaultTopP, MinP: defaultMinP,
		RepeatPenalty: 1, PenaltyLastN: defaultRepeatLastN,
	}
	type rng struct {
		name   string
		v      *float64
		lo, hi float64
		dst    *float32
	}
	for _, r := range []rng{
		{"temperature", f.Temperature, 0, 100, &cfg.Temperature},
		{"top_p", f.TopP, 0, 1, &cfg.TopP},
		{"min_p", f.MinP, 0, 1, &cfg.MinP},
		{"presence_penalty", f.PresencePenalty, -2, 2, &cfg.PresencePenalty},
		{"frequency_penalty", f.FrequencyPenalty, -2, 2, &cfg.FrequencyPenalty},
		{"repeat_penalty", f.RepeatPenalty, 0, 100, &cfg.RepeatPenalty},
	} {
		if r.v == nil {
			continue
		}
		if math.IsNaN(*r.v) || *r.v < r.lo || *r.v > r.hi {
			return cfg, errInvalid(fmt.Sprintf("%s = %g is outside [%g, %g]", r.name, *r.v, r.lo, r.hi))
		}
		*r.dst = float32(*r.v)
	}
	if f.TopK != nil {
		if *f.TopK < 0 {
			return cfg, errInvalid(fmt.Sprintf("top_k = %d must not be negative", *f.TopK))
		}
		cfg.TopK = *f.TopK
	}
	if f.RepeatLastN != nil {
		if *f.RepeatLastN < -1 {
			return cfg, errInvalid(fmt.Sprintf("repeat_last_n = %d must be -1 or more", *f.RepeatLastN))
		}
		cfg.PenaltyLastN = *f.RepeatLastN
	}
	for id := range f.LogitBias {
		if id < 0 || int(id) >= vocab {
			return cfg, errInvalid(fmt.Sprintf("logit_bias names token %d, outside the vocabulary (0..%d)", id, vocab-1))
		}
	}
	cfg.LogitBias = f.LogitBias
	if f.IgnoreEOS {
		cfg.LogitBias = maps.Clone(f.LogitBias)
		if cfg.LogitBias == nil {
			cfg.LogitBias = map[int32]float32{}
		}
		for _, t := range info.EOG {
			cfg.LogitBias[t] = float32(math.Inf(-1))
		}
	}
	if f.Seed != nil && *f.Seed >= 0 && *f.Seed != 0xFFFFFFFF {
		cfg.Seed = uint64(*f.Seed)
	} else {
		cfg.Seed = rand.Uint64()
	}
	return cfg, nil
}

// maxTokens is the generation limit: the request's (max_completion_tokens,
// max_tokens or n_predict; -1 or absent means until the context is full),
// never past the context.
func maxTokens(f *samplingFields, promptLen, ctxLen int) (int, *apiError) {
	if promptLen >= ctxLen {
		return 0, errContext(fmt.Sprintf("the prompt is %d tokens, the context holds %d: shorten it", promptLen, ctxLen))
	}
	room := ctxLen - promptLen
	for _, x := range []struct {
		name string
		v    *int
	}{{"max_completion_tokens", f.MaxCompletionTokens}, {"max_tokens", f.MaxTokens}, {"n_predict", f.NPredict}} {
		if x.v == nil || *x.v == -1 {
			continue
		}
		if *x.v < 1 {
			return 0, errInvalid(fmt.Sprintf("%s = %d must be at least 1 (or -1 for no limit)", x.name, *x.v))
		}
		if *x.v > ctxLen {
			return 0, errInvalid(fmt.Sprintf("%s = %d is more than the context holds (%d tokens)", x.name, *x.v, ctxLen))
		}
		return min(*x.v, room), nil
	}
	return room, nil
}

// run waits for the engine and generates. onStart runs once the engine is
// ours (streams send their headers then, so a full queue can still be a 429).
// A generation that shutdown ends returns errInterrupted with what it made.
func (s *Server) run(c echo.Context, b Backend, j *job, onStart func() error, emit func(Piece) error) (GenerateResult, error) {
	res, err := s.runN(c, b, []*job{j}, onStart, []func(Piece) error{emit})
	return res[0], err
}

// runN is run for the choices of one request (OpenAI's n): jobs of one
// prompt, generated together when the backend can (ChoicesBackend: the
// prompt evaluated once), else one after another. emits[i] gets choice
// i's pieces, never two at once. It returns every choice's result.
func (s *Server) runN(c echo.Context, b Backend, jobs []*job, onStart func() error, emits []func(Piece) error) ([]GenerateResult, error) {
	ctx := c.Request().Context()
	res := make([]GenerateResult, len(jobs))
	release, err := s.queue.acquire(ctx, s.metrics.retryAfter())
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return res, errClientGone
		}
		return res, err
	}
	defer release()
	if err := onStart(); err != nil {
		return res, err
	}
	start := time.Now()
	gctx, stop := s.generationContext(ctx)
	reqs := make([]GenerateRequest, len(jobs))
	counted := make([]func(Piece) error, len(jobs))
	for i, j := range jobs {
		reqs[i] = GenerateRequest{Prompt: j.prompt, Sampling: j.sampling, MaxTokens: j.maxTokens, Special: j.special, Mask: j.mask, PromptLogits: j.promptLogits}
		counted[i] = func(p Piece) error {
			s.metrics.emitted.Add(1)
			return emits[i](p)
		}
	}
	res, err = generateChoices(gctx, b, reqs, counted)
	stop()
	all := combine(res)
	cancelled := ctx.Err() != nil || errors.Is(err, errClientGone)
	if !cancelled && err != nil && interrupted(gctx) {
		err = errInterrupted
	}
	s.metrics.record(all, cancelled || err == errInterrupted)
	s.logRequest(jobs[0], all, time.Since(start), cancelled, err)
	if cancelled {
		return res, errClientGone
	}
	if err == errInterrupted {
		return res, err
	}
	if err != nil {
		return res, &internalError{what: "generation", err: err}
	}
	return res, nil
}

// generateChoices runs the choices on the backend.
func generateChoices(ctx context.Context, b Backend, reqs []GenerateRequest, emits []func(Piece) error) ([]GenerateResult, error) {
	if len(reqs) == 1 {
		r, err := b.Generate(ctx, reqs[0], emits[0])
		return []GenerateResult{r}, err
	}
	if cb, ok := b.(ChoicesBackend); ok {
		return cb.GenerateN(ctx, reqs, emits)
	}
	res := make([]GenerateResult, len(reqs))
	for i := range reqs {
		var err error
		if res[i], err = b.Generate(ctx, reqs[i], emits[i]); err != nil {
			return res, err
		}
	}
	return res, nil
}

// combine is what the choices of one request did together, for usage,
// timings, metrics and the log: the prompt once, every choice's tokens.
func combine(res []GenerateResult) GenerateResult {
	all := res[0]
	for _, r := range res[1:] {
		all.GeneratedTokens += r.GeneratedTokens
		all.GenTime = max(all.GenTime, r.GenTime)
	}
	return all
}

// choiceCount validates n (OpenAI's choices per request), or n_cmpl
// (llama-server's name, which wins when both are set): 1 to the server's
// slots, since the choices run at once, each on its own slot
// (llama-server's limit too); only the routes that return several
// results (chat, completions and llama-server's /completion and /infill)
// take more than one.
func (s *Server) choiceCount(f *samplingFields, multi bool) (int, *apiError) {
	name, v := "n", f.N
	if f.NCmpl != nil {
		name, v = "n_cmpl", f.NCmpl
	}
	if v == nil {
		return 1, nil
	}
	n := *v
	switch {
	case n < 1:
		return 0, errInvalid(fmt.Sprintf("%s = %d must be at least 1", name, n))
	case n > 1 && !multi:
		return 0, errInvalid(fmt.Sprintf("%s > 1 is supported on /v1/chat/completions, /v1/completions, /completion and /infill only", name))
	case n > s.opts.Parallel:
		return 0, errInvalid(fmt.Sprintf("%s = %d is more choices than this server runs at once: it has %d slots (start it with -np %d or more)", name, n, s.opts.Parallel, n))
	}
	return n, nil
}

// choiceJobs makes the jobs of n choices (build makes one, with its own
// masks and recorders; build is called n times): choice i samples with the
// first one's seed + i, as llama-server seeds them.
func choiceJobs[T any](n int, build func() (T, *job, *apiError)) ([]T, *apiError) {
	out := make([]T, n)
	var seed uint64
	for i := range out {
		x, j, aerr := build()
		if aerr != nil {
			return nil, aerr
		}
		if i == 0 {
			seed = j.sampling.Seed
		}
		j.sampling.Seed = seed + uint64(i)
		out[i] = x
	}
	return out, nil
}

// errClientGone ends a request whose client left; nothing is sent.
var errClientGone = errors.New("client disconnected")

func (s *Server) logRequest(j *job, r GenerateResult, total time.Duration, cancelled bool, err error) {
	pn := r.PromptTokens - r.CachedTokens
	pms := float64(r.PromptTime.Microseconds()) / 1000
	gms := float64(r.GenTime.Microseconds()) / 1000
	fmt.Fprintf(s.opts.RequestLog, "prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
		pms, pn, perToken(pms, pn), perSecond(pms, pn))
	fmt.Fprintf(s.opts.RequestLog, "       eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
		gms, r.GeneratedTokens, perToken(gms, r.GeneratedTokens), perSecond(gms, r.GeneratedTokens))
	fmt.Fprintf(s.opts.RequestLog, "      total time = %10.2f ms / %5d tokens\n", pms+gms, pn+r.GeneratedTokens)
	s.log.Info("request", "route", j.route, "prompt_tokens", r.PromptTokens, "cached_tokens", r.CachedTokens,
		"generated_tokens", r.GeneratedTokens, "finish", string(r.Finish), "cancelled", cancelled,
		"wall_ms", total.Milliseconds(), "err", err)
}

func perToken(ms float64, n int) float64 {
	if n == 0 {
		return 0
	}
	return ms / float64(n)
}

func perSecond(ms float64, n int) float64 {
	if ms <= 0 {
		return 0
	}
	return 1000 * float64(n) / ms
}
