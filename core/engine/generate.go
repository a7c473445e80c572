package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/sample"
	"github.com/k3-inference/k3/core/tokenizer"
)

// Options are the run-time settings of an Engine.
type Options struct {
	// Context is the most tokens a sequence may hold (prompt and
	// generated).
	Context int
	Mode    Mode // how prompts are fed (Batch by default)
	UBatch  int  // prompt tokens per forward call; <= 0: DefaultUBatch
	// Snapshots is how many prompt-end states each slot keeps for prefix
	// reuse (each a copy of the recurrent state); 0 means 1, negative
	// none.
	Snapshots int
	// Slots is how many sequences the engine keeps (llama-server's -np):
	// each holds its conversation's state between requests, and up to
	// Slots requests run at once, their decode steps batched. <= 0: 1.
	Slots int
	// PrefixCache keeps snapshots of prompt prefixes that any slot can
	// resume from, in memory and optionally on disk; the zero value is
	// off.
	PrefixCache CacheOptions
}

// Engine owns one model, its tokenizer and Options.Slots sequences
// (slots), and runs generation requests on them, up to one per slot at a
// time. A request goes to the free slot whose sequence its prompt extends
// (the same conversation's next turn), else to the least recently used
// free slot; there it reuses what the sequence holds when the prompt
// extends it, restarts from a snapshot taken at the end of an earlier
// prompt when the prompt shares that prompt but not what was generated
// after it, or resumes from the shared prefix cache. The slots' decode
// steps run as one batch per step (stepper).
type Engine struct {
	m      model.Model
	tok    *tokenizer.Tokenizer
	ctxLen int
	o      Options

	free  chan struct{} // one token per free slot
	admit chan struct{} // held by the request gathering its slots
	mu    sync.Mutex    // guards the slots' bookkeeping (busy, used, held)
	slots []*slot
	tick  uint64
	cache *prefixCache // nil when off
	step  *stepper
}

// New returns an engine for m and tok with o.Context tokens of context.
func New(m model.Model, tok *tokenizer.Tokenizer, o Options) (*Engine, error) {
	if o.Context <= 0 {
		return nil, errors.New("engine: no context length; set Options.Context")
	}
	if tok.NVocab() > m.Params().Vocab {
		return nil, fmt.Errorf("engine: the tokenizer has %d tokens, the model's output only %d", tok.NVocab(), m.Params().Vocab)
	}
	if o.Snapshots == 0 {
		o.Snapshots = 1
	}
	if o.Slots <= 0 {
		o.Slots = 1
	}
	e := &Engine{m: m, tok: tok, ctxLen: o.Context, o: o, free: make(chan struct{}, o.Slots), admit: make(chan struct{}, 1), step: newStepper(m, o.UBatch)}
	for i := range o.Slots {
		e.slots = append(e.slots, &slot{id: i, e: e})
		e.free <- struct{}{}
	}
	if o.PrefixCache.enabled() {
		if _, ok := m.NewState().(model.Portable); !ok {
			return nil, fmt.Errorf("engine: a prefix cache needs a state that can be saved; %s's cannot", m.Params().Arch)
		}
		c, err := openPrefixCache(o.PrefixCache, m.Params().Vocab)
		if err != nil {
			return nil, err
		}
		e.cache = c
	}
	return e, nil
}

// Close writes each slot's last prompt end into the prefix cache when
// the cache keeps a directory (the slots are lost with the process; the
// directory is not, so those conversations resume after a restart), and
// waits for the disk writes. The engine must be idle.
func (e *Engine) Close() error {
	if e.cache == nil {
		return nil
	}
	if e.cache.o.Dir != "" {
		for _, s := range e.slots {
			s.evict(nil)
		}
	}
	return e.cache.close()
}

// CacheStats reports the prefix cache's counters (zero when it is off).
func (e *Engine) CacheStats() CacheStats { return e.cache.stats() }

// Model is the engine's model.
func (e *Engine) Model() model.Model { return e.m }

// Tokenizer is the engine's tokenizer.
func (e *Engine) Tokenizer() *tokenizer.Tokenizer { return e.tok }

// Context is the most tokens a sequence may hold.
func (e *Engine) Context() int { return e.ctxLen }

// Slots is the number of sequences the engine keeps.
func (e *Engine) Slots() int { return len(e.slots) }

// Reset forgets every slot's sequence and snapshots (not the prefix
// cache); it waits for running requests to end.
func (e *Engine) Reset() {
	for range e.slots {
		<-e.free
	}
	e.mu.Lock()
	for _, s := range e.slots {
		s.drop()
		s.held = nil
	}
	e.mu.Unlock()
	for range e.slots {
		e.free <- struct{}{}
	}
}

// Request is one generation.
type Request struct {
	// Prompt is the token sequence to continue. When nil, Text is tokenized
	// with special tokens parsed and BOS added as the vocabulary asks.
	Prompt []int32
	Text   string
	// Sampling selects the sampler chain; the zero value is greedy.
	Sampling sample.Config
	// MaxTokens bounds the generated tokens; <= 0 means until the context is
	// full. Generation also ends at an end-of-generation token (eos, eot,
	// <|end_of_msg|>, as the vocabulary marks them) and at a stop string.
	MaxTokens int
	// Stop strings end generation; they are matched across token boundaries
	// and never emitted, nor is anything after them.
	Stop []string
	// Special renders control tokens as their text (a chat reply parser
	// needs the markers); otherwise they render as nothing.
	Special bool
	// Mask, if set, constrains each sampled token: it gets the tokens
	// generated so far and a copy of the next token's logits, and sets
	// the logits of the tokens not allowed to -Inf. A mask that allows
	// nothing is ignored for that token.
	Mask func(generated []int32, logits []float32)
	// PromptLogits, if set, gets for each prompt position i >= 1 the
	// logits the model gives prompt[i] (those after position i-1): the
	// prompt's log-probabilities (echo). The whole prompt is then
	// evaluated, nothing reused, since reused positions have no logits.
	PromptLogits func(i int, logits []float32)
}

// Piece is one generated token and the text it makes final: possibly
// empty while a UTF-8 character or a possible stop string is incomplete.
// Text still held back when generation ends comes in a last Piece whose
// Token is tokenizer.NoToken. End-of-generation tokens are not emitted.
type Piece struct {
	Token int32
	Text  string
}

// ErrStop, returned by an emit callback, ends generation normally
// (reported as sample.FinishStop).
var ErrStop = errors.New("engine: stop generation")

// Result reports what a generation did. It is filled as far as the
// generation got when Generate returns an error.
type Result struct {
	Finish       sample.FinishReason
	PromptTokens int // tokens of the prompt
	ReusedTokens int // of those, already in the sequence (not prefilled)
	// CachedTokens are the reused tokens that came from the shared prefix
	// cache (memory or disk) rather than the slot's own sequence.
	CachedTokens int
	Slot         int // the slot that ran the request
	// PrefillTokens are the prompt tokens this request evaluated: the rest
	// of the prompt, or fewer when it was cancelled during the prefill.
	PrefillTokens   int
	GeneratedTokens int // sampled tokens, an end-of-generation token included
	PrefillTime     time.Duration
	DecodeTime      time.Duration // from the first sampled token to the end
}

// PrefillTPS is prompt tokens evaluated per second.
func (r Result) PrefillTPS() float64 { return rate(r.PrefillTokens, r.PrefillTime) }

// DecodeTPS is generated tokens per second.
func (r Result) DecodeTPS() float64 { return rate(r.GeneratedTokens, r.DecodeTime) }

func rate(n int, d time.Duration) float64 {
	if n <= 0 || d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Generate evaluates the prompt, reusing what the sequence already holds,
// then samples tokens and calls emit with each. It stops at an
// end-of-generation token, a stop string, the token limit or a full
// context, or when emit returns ErrStop (all normal ends), when emit
// returns another error (returned), and when ctx is done: ctx is checked
// before every token and between prompt batches, and ctx.Err() is
// returned. Generate may be called from any goroutine; calls run one at a
// time per slot; more wait for a slot.
func (e *Engine) Generate(ctx context.Context, req Request, emit func(Piece) error) (Result, error) {
	res, err := e.GenerateN(ctx, []Request{req}, []func(Piece) error{emit})
	return res[0], err
}

// GenerateN runs several generations of one prompt (OpenAI's n choices):
// on len(reqs) slots taken at once, the prompt prefilled on the first and
// its state copied to the others, then every choice decoded in the same
// batched steps, each with its own sampler, mask, stop strings and limit
// (the requests differ in those only; their prompts must be equal). It
// returns each choice's Result (always len(reqs) of them) and the first
// error any choice ended with; a choice whose emit returns ErrStop ends
// alone. emits[i] gets choice i's pieces; the emits are called one at a
// time. More choices than the engine has slots are an error
// (ErrTooManyChoices): they could never run together.
func (e *Engine) GenerateN(ctx context.Context, reqs []Request, emits []func(Piece) error) ([]Result, error) {
	n := len(reqs)
	res := make([]Result, max(n, 1))
	if n == 0 || len(emits) != n {
		return res, fmt.Errorf("engine: %d requests with %d emit functions", n, len(emits))
	}
	if n > len(e.slots) {
		return res, fmt.Errorf("%w: %d asked, the engine has %d slots (-np)", ErrTooManyChoices, n, len(e.slots))
	}
	prompt, err := e.promptOf(reqs[0])
	if err != nil {
		return res, err
	}
	for i := 1; i < n; i++ {
		p, err := e.promptOf(reqs[i])
		if err != nil {
			return res, err
		}
		if !slices.Equal(p, prompt) {
			return res, fmt.Errorf("engine: choice %d has another prompt than choice 0", i)
		}
	}
	for i := range res {
		res[i].PromptTokens = len(prompt)
	}
	if err := e.checkPrompt(prompt); err != nil {
		return res, err
	}
	sls, err := e.acquire(ctx, prompt, n)
	if err != nil {
		return res, err
	}
	defer e.release(sls...)

	start := time.Now()
	logits, err := sls[0].prefill(ctx, prompt, promptLogitsOf(reqs), &res[0])
	if err == nil && n > 1 {
		err = share(ctx, sls, prompt, res)
	}
	for i := range res {
		res[i].Slot = sls[i].id
		res[i].PrefillTime = time.Since(start)
	}
	if err != nil {
		return res, err
	}
	if n == 1 {
		e.step.begin()
		defer e.step.end()
		err := e.sample(ctx, sls[0], reqs[0], prompt, logits, emits[0], &res[0])
		return res, err
	}

	// Every choice counts as decoding before any hands in a token, so
	// that the first step waits for all of them.
	for range n {
		e.step.begin()
	}
	var emitMu sync.Mutex
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			defer e.step.end()
			emit := func(p Piece) error {
				emitMu.Lock()
				defer emitMu.Unlock()
				return emits[i](p)
			}
			errs[i] = e.sample(ctx, sls[i], reqs[i], prompt, sls[i].last, emit, &res[i])
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

// ErrTooManyChoices is GenerateN's error for more choices than slots.
var ErrTooManyChoices = errors.New("engine: more choices than slots")

func (e *Engine) promptOf(req Request) ([]int32, error) {
	if req.Prompt != nil {
		return req.Prompt, nil
	}
	p, err := e.tok.Tokenize(req.Text, true, true)
	if err != nil {
		return nil, fmt.Errorf("engine: tokenize prompt: %w", err)
	}
	return p, nil
}

// promptLogitsOf hands the prompt's logits (echo) to every choice that
// asked for them; nil when none did.
func promptLogitsOf(reqs []Request) func(int, []float32) {
	var fs []func(int, []float32)
	for _, r := range reqs {
		if r.PromptLogits != nil {
			fs = append(fs, r.PromptLogits)
		}
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(i int, logits []float32) {
		for _, f := range fs {
			f(i, logits)
		}
	}
}

// share gives the other slots of a multi-choice request the first slot's
// sequence, just prefilled: a copy of its state when the state can be
// copied, else their own prefill.
func share(ctx context.Context, sls []*slot, prompt []int32, res []Result) error {
	src := sls[0]
	p, ok := src.run.S.(model.Portable)
	if !ok {
		for i, s := range sls[1:] {
			if _, err := s.prefill(ctx, prompt, nil, &res[i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	b, err := p.AppendBinary(nil)
	if err != nil {
		return fmt.Errorf("engine: copy the prompt's state: %w", err)
	}
	for i, s := range sls[1:] {
		if err := s.copyFrom(src, b); err != nil {
			return err
		}
		res[i+1].ReusedTokens, res[i+1].CachedTokens = len(prompt), res[0].CachedTokens
	}
	return nil
}

// sample is one choice's decoding loop, from the logits after the prompt
// (the caller brackets it with e.step.begin and end).
func (e *Engine) sample(ctx context.Context, sl *slot, req Request, prompt []int32, logits []float32, emit func(Piece) error, res *Result) error {
	limit := e.ctxLen - len(prompt)
	if req.MaxTokens > 0 {
		limit = min(limit, req.MaxTokens)
	}
	start := time.Now()
	defer func() { res.DecodeTime = time.Since(start) }()
	smp := sample.New(req.Sampling)
	for _, t := range prompt {
		smp.Accept(t)
	}
	out := &stream{dec: e.tok.NewDecoder(false, req.Special), stop: sample.NewStopMatcher(req.Stop), emit: emit}
	var generated []int32
	var masked []float32
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		next := logits
		if req.Mask != nil {
			// A copy: logits are the sequence's, kept for prefix reuse.
			masked = append(masked[:0], logits...)
			req.Mask(generated, masked)
			if slices.ContainsFunc(masked, func(x float32) bool { return !math.IsInf(float64(x), -1) }) {
				next = masked
			}
		}
		tok, err := smp.Sample(next)
		if err != nil {
			return fmt.Errorf("engine: sample: %w", err)
		}
		smp.Accept(tok)
		generated = append(generated, tok)
		res.GeneratedTokens++
		if e.tok.IsEOG(tok) {
			res.Finish = sample.FinishStop
			return out.end()
		}
		stopped, err := out.token(tok)
		if errors.Is(err, ErrStop) || (err == nil && stopped) {
			res.Finish = sample.FinishStop
			return nil
		}
		if err != nil {
			return err
		}
		if res.GeneratedTokens >= limit {
			res.Finish = sample.FinishLength
			return out.end()
		}
		if logits, err = sl.decode(tok); err != nil {
			return err
		}
	}
}

// checkPrompt rejects prompts that cannot run: empty, longer than the
// context (which must also leave room for a generated token), or holding
// ids the model does not have.
func (e *Engine) checkPrompt(prompt []int32) error {
	if len(prompt) == 0 {
		return errors.New("engine: the prompt is empty")
	}
	if len(prompt) >= e.ctxLen {
		return fmt.Errorf("engine: the prompt has %d tokens but the context holds %d (prompt and generated tokens together); shorten the prompt or raise the context (-c)", len(prompt), e.ctxLen)
	}
	v := e.m.Params().Vocab
	for i, t := range prompt {
		if t < 0 || int(t) >= v {
			return fmt.Errorf("engine: prompt token %d is %d, outside the vocabulary of %d", i, t, v)
		}
	}
	return nil
}

// stream turns tokens into emitted text: through the streaming decoder
// (never half a UTF-8 character), then the stop matcher (never any part of
// a stop string).
type stream struct {
	dec  *tokenizer.Decoder
	stop *sample.StopMatcher
	emit func(Piece) error
}

func (s *stream) token(tok int32) (stopped bool, err error) {
	text, err := s.dec.Add(tok)
	if err != nil {
		return false, fmt.Errorf("engine: token %d: %w", tok, err)
	}
	text, stopped = s.stop.Feed(text)
	return stopped, s.emit(Piece{Token: tok, Text: text})
}

// end releases what the decoder and the stop matcher still hold.
func (s *stream) end() error {
	text, stopped := s.stop.Feed(s.dec.Flush())
	if !stopped {
		text += s.stop.Flush()
	}
	if text == "" {
		return nil
	}
	if err := s.emit(Piece{Token: tokenizer.NoToken, Text: text}); err != nil && !errors.Is(err, ErrStop) {
		return err
	}
	return nil
}
