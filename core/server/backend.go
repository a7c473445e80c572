package server

import (
	"context"
	"errors"
	"time"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/sample"
)

// Backend is everything the server needs from the model side. The server
// owns HTTP, request validation, stop strings and reply parsing; a Backend
// owns tokens, the sequence state and the sampling loop. Generate is
// called by at most Options.Parallel requests at a time (the server
// queues the rest).
type Backend interface {
	ModelInfo() ModelInfo
	// Template is the model's compiled chat template, nil when it has none
	// (then /v1/chat/completions answers 501).
	Template() *chat.Template
	Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error)
	// Detokenize renders tokens as llama-server's /detokenize does.
	Detokenize(tokens []int32) (string, error)
	// Generate evaluates req.Prompt (reusing whatever prefix of it the
	// sequence state already holds) and samples tokens, calling emit with
	// each one. It stops at an end-of-generation token, at req.MaxTokens, when
	// emit returns ErrStop (reported as FinishStop) or another error (returned),
	// and when ctx is done (checked before every token and between prompt
	// batches; ctx.Err() is returned).
	Generate(ctx context.Context, req GenerateRequest, emit func(Piece) error) (GenerateResult, error)
	// Stats is a snapshot of the engine's counters for /metrics and the page.
	Stats() EngineStats
}

// ChoicesBackend is implemented by a Backend that runs several
// generations of one prompt together (OpenAI's n): the prompt evaluated
// once and its state shared, the choices decoded side by side. Without it
// the server runs the choices one after another.
type ChoicesBackend interface {
	// GenerateN is Generate for every request at once; their prompts are
	// equal. emits[i] gets choice i's pieces, never two at once. It
	// returns a result per request and the first error any ended with.
	GenerateN(ctx context.Context, reqs []GenerateRequest, emits []func(Piece) error) ([]GenerateResult, error)
}

// HealthReporter is implemented by a Backend that can be degraded while it
// runs: a plugin process it depends on is down or restarting. /health
// answers 503 "degraded" while Health returns an error.
type HealthReporter interface {
	// Health is nil while the backend can serve; otherwise it says which
	// part is not ok and since when. It is shown to clients (/health needs
	// no API key), so it names no files.
	Health() error
}

// SlotReporter is implemented by a Backend that keeps several sequences
// (slots): /slots and /props report them.
type SlotReporter interface {
	Slots() []SlotInfo
}

// SlotInfo is one slot as /slots reports it.
type SlotInfo struct {
	ID         int
	Context    int  // tokens its sequence may hold
	Processing bool // a request runs on it
	Tokens     int  // tokens its sequence holds (cached for the next request)
}

// FIMBackend is implemented by a Backend that can tell its vocabulary's
// fill-in-the-middle tokens (/infill); each is -1 when the model has none.
type FIMBackend interface {
	FIMTokens() FIM
}

// ErrStop is returned by an emit callback to end generation normally (a stop
// string was found).
var ErrStop = errors.New("server: stop generation")

// ModelInfo describes the loaded model.
type ModelInfo struct {
	ID            string // the name clients use (--alias, else the file name)
	File          string // the model file's name, without its directory (/props)
	Arch          string
	ContextLength int // tokens a sequence may hold (prompt + generated)
	Vocab         int
	Params        int64 // parameter count, 0 if unknown
	Size          int64 // bytes of weights on storage
	BOSToken      string
	EOSToken      string
	EOG           []int32 // end-of-generation tokens (ignore_eos bans them)
}

// GenerateRequest is one generation.
type GenerateRequest struct {
	Prompt   []int32
	Sampling sample.Config
	// MaxTokens bounds the generated tokens; the server always sets it so that
	// prompt plus generation fits the context.
	MaxTokens int
	// Special renders control tokens as their text (the chat parser needs
	// the markers); otherwise they render as nothing, as in llama-server.
	Special bool
	// Mask, if set, constrains sampling (engine.Request.Mask).
	Mask func(generated []int32, logits []float32)
	// PromptLogits, if set, gets the logits that predict each prompt token
	// after the first (engine.Request.PromptLogits; for echo).
	PromptLogits func(i int, logits []float32)
}

// Piece is one generated token and the text it completes (possibly empty
// while a multi-byte character is incomplete).
type Piece struct {
	Token int32
	Text  string
}

// GenerateResult reports what a generation did.
type GenerateResult struct {
	PromptTokens    int // tokens of req.Prompt
	CachedTokens    int // of those, reused: held by the slot or resumed from the prefix cache
	GeneratedTokens int
	PromptTime      time.Duration // evaluating the uncached prompt tokens
	GenTime         time.Duration // from the first sampled token to the end
	Finish          sample.FinishReason
}

// EngineStats are cumulative engine counters. Zero values mean "none yet"
// or, where the engine cannot know (no expert cache), "not measured".
type EngineStats struct {
	CacheHits, CacheMisses int64
	BytesRead              int64   // bytes read from storage
	StorageWaitSeconds     float64 // time compute waited on storage
	ResidentBytes          int64
	BudgetBytes            int64
}
