// Package local is the server.Backend of a model running in this process:
// an engine.Engine (sequence, prefix reuse, sampling loop) on a
// runtime.Runtime, plus the model file's chat template.
package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/runtime"
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/tokenizer"
)

// Options are the settings of a local backend.
type Options struct {
	ID      string // model id; default the file name without .gguf and split suffix
	Threads int    // Open only; <= 0: one per CPU
	Context int    // Open only; tokens per sequence; <= 0: the model's training context
	UBatch  int    // Open only; prompt tokens per forward call; <= 0: engine.DefaultUBatch
	Slots   int    // Open only; sequences kept and run at once; <= 0: 1
	Budget  int64  // memory budget in bytes, reported when Stats is nil
	// Stats supplies the engine's storage counters; nil means the
	// runtime's stager's (FromRuntime), else what /proc/self tells:
	// resident memory and bytes read from storage.
	Stats func() server.EngineStats
	// ChatTemplate, when set, replaces the model's chat template
	// (--chat-template-file).
	ChatTemplate string
	// Health reports a plugin the engine depends on that is down or
	// restarting (see server.HealthReporter); nil: always healthy.
	Health func() error
}

// Backend adapts an engine to the server.
type Backend struct {
	eng  *engine.Engine
	tok  *tokenizer.Tokenizer
	tmpl *chat.Template
	info server.ModelInfo
	opts Options
	rt   *runtime.Runtime // closed by Close when FromRuntime was given it
}

// Open loads the model at path (the first shard of a split set) on a plain
// mapping of the file with the reference kernels (runtime.Open without a
// profile) and serves it.
func Open(path string, o Options) (*Backend, error) {
	rt, err := runtime.Open(context.Background(), path, nil, runtime.Options{Threads: o.Threads, Context: o.Context, UBatch: o.UBatch, Slots: o.Slots})
	if err != nil {
		return nil, err
	}
	b, err := FromRuntime(rt, o)
	if err != nil {
		rt.Close()
		return nil, err
	}
	return b, nil
}

// FromRuntime serves an engine on rt's model, with rt's context and
// ubatch, its stager's counters and its plugins' health; the backend owns rt from then on and Close closes it (after the
// server drained). On error rt stays the caller's.
func FromRuntime(rt *runtime.Runtime, o Options) (*Backend, error) {
	eng, err := rt.Engine(engine.Options{})
	if err != nil {
		return nil, err
	}
	if o.Stats == nil && rt.Staged != nil {
		o.Stats = stagedStats(rt.Staged)
	}
	if o.Budget == 0 {
		o.Budget = int64(rt.Mode.Budget)
	}
	if o.Health == nil {
		o.Health = rt.Health
	}
	b, err := New(eng, rt.File, o)
	if err != nil {
		return nil, err
	}
	b.rt = rt
	return b, nil
}

// stagedStats reports a stager's counters to /metrics and the page.
func stagedStats(st *engine.Staged) func() server.EngineStats {
	return func() server.EngineStats {
		s, err := st.Stats()
		if err != nil {
			return server.EngineStats{}
		}
		return server.EngineStats{CacheHits: int64(s.Hits), CacheMisses: int64(s.Misses), BytesRead: s.BytesRead,
			StorageWaitSeconds: s.WaitTime.Seconds(), ResidentBytes: s.ResidentBytes, BudgetBytes: s.BudgetBytes}
	}
}

// Runtime is the runtime the backend serves (nil when built with New).
func (b *Backend) Runtime() *runtime.Runtime { return b.rt }

// New serves eng, whose model and tokenizer come from f (read here for the
// chat template and model facts; f stays the caller's).
func New(eng *engine.Engine, f *gguf.File, o Options) (*Backend, error) {
	tok := eng.Tokenizer()
	var tmpl *chat.Template
	if src := f.String("tokenizer.chat_template", ""); src != "" && o.ChatTemplate == "" {
		var err error
		if tmpl, err = chat.New(src); err != nil {
			return nil, fmt.Errorf("local: %s: tokenizer.chat_template: %w", f.Path(), err)
		}
	}
	if o.ChatTemplate != "" {
		var err error
		if tmpl, err = chat.New(o.ChatTemplate); err != nil {
			return nil, fmt.Errorf("local: chat template: %w", err)
		}
	}
	if o.ID == "" {
		o.ID = modelName(f.Path())
	}
	info := server.ModelInfo{ID: o.ID, File: filepath.Base(f.Path()), Arch: f.Arch(), ContextLength: eng.Context(), Vocab: eng.Model().Params().Vocab, EOG: tok.EOG()}
	for _, t := range f.Tensors() {
		n := int64(1)
		for _, d := range t.Shape {
			n *= d
		}
		info.Params += n
		info.Size += t.Size
	}
	if id := tok.BOS(); id != tokenizer.NoToken {
		info.BOSToken = tok.Token(id)
	}
	if id := tok.EOS(); id != tokenizer.NoToken {
		info.EOSToken = tok.Token(id)
	}
	return &Backend{eng: eng, tok: tok, tmpl: tmpl, info: info, opts: o}, nil
}

// modelName strips the directory, .gguf and a -00001-of-000NN split suffix.
func modelName(path string) string {
	name := strings.TrimSuffix(filepath.Base(path), ".gguf")
	if i := strings.LastIndex(name, "-00001-of-"); i > 0 {
		name = name[:i]
	}
	return name
}

// Close waits for the prefix cache's disk writes and stops the runtime
// (stager, kernels, model file) when the backend owns one; the server
// must have drained.
func (b *Backend) Close() error {
	err := b.eng.Close()
	if b.rt != nil {
		err = errors.Join(err, b.rt.Close())
	}
	return err
}

// Slots implements server.SlotReporter with the engine's slots.
func (b *Backend) Slots() []server.SlotInfo {
	var out []server.SlotInfo
	for _, s := range b.eng.SlotInfo() {
		out = append(out, server.SlotInfo{ID: s.ID, Context: s.Context, Processing: s.Processing, Tokens: s.Tokens})
	}
	return out
}

func (b *Backend) ModelInfo() server.ModelInfo { return b.info }
func (b *Backend) Template() *chat.Template    { return b.tmpl }

func (b *Backend) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	return b.tok.Tokenize(text, addSpecial, parseSpecial)
}

// Detokenize renders as llama-server's /detokenize (tokens_to_str): every
// token's piece with special tokens shown.
func (b *Backend) Detokenize(tokens []int32) (string, error) {
	var sb strings.Builder
	for _, t := range tokens {
		p, err := b.tok.Piece(t, true)
		if err != nil {
			return "", err
		}
		sb.WriteString(p)
	}
	return sb.String(), nil
}

// Generate implements server.Backend on the engine. Stop strings are the
// server's business, so the engine gets none.
func (b *Backend) Generate(ctx context.Context, req server.GenerateRequest, emit func(server.Piece) error) (server.GenerateResult, error) {
	r, err := b.GenerateN(ctx, []server.GenerateRequest{req}, []func(server.Piece) error{emit})
	return r[0], err
}

// GenerateN implements server.ChoicesBackend on the engine's GenerateN.
func (b *Backend) GenerateN(ctx context.Context, reqs []server.GenerateRequest, emits []func(server.Piece) error) ([]server.GenerateResult, error) {
	ereqs := make([]engine.Request, len(reqs))
	eemits := make([]func(engine.Piece) error, len(reqs))
	for i, req := range reqs {
		ereqs[i] = engine.Request{Prompt: req.Prompt, Sampling: req.Sampling, MaxTokens: req.MaxTokens, Special: req.Special, Mask: req.Mask, PromptLogits: req.PromptLogits}
		eemits[i] = func(p engine.Piece) error {
			err := emits[i](server.Piece{Token: p.Token, Text: p.Text})
			if errors.Is(err, server.ErrStop) {
				return engine.ErrStop
			}
			return err
		}
	}
	rs, err := b.eng.GenerateN(ctx, ereqs, eemits)
	out := make([]server.GenerateResult, len(reqs))
	for i := range out {
		r := rs[min(i, len(rs)-1)]
		out[i] = server.GenerateResult{PromptTokens: r.PromptTokens, CachedTokens: r.ReusedTokens, GeneratedTokens: r.GeneratedTokens,
			PromptTime: r.PrefillTime, GenTime: r.DecodeTime, Finish: r.Finish}
	}
	return out, err
}

// FIMTokens implements server.FIMBackend with the vocabulary's
// fill-in-the-middle tokens.
func (b *Backend) FIMTokens() server.FIM {
	pre, suf, mid := b.tok.FIM()
	rep, sep := b.tok.FIMRepo()
	return server.FIM{Pre: pre, Suf: suf, Mid: mid, Rep: rep, Sep: sep}
}

// Stats implements server.Backend.
func (b *Backend) Stats() server.EngineStats {
	if b.opts.Stats != nil {
		return b.opts.Stats()
	}
	return server.EngineStats{ResidentBytes: residentBytes(), BytesRead: storageReadBytes(), BudgetBytes: b.opts.Budget}
}

// Health implements server.HealthReporter with Options.Health.
func (b *Backend) Health() error {
	if b.opts.Health == nil {
		return nil
	}
	return b.opts.Health()
}

func residentBytes() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func storageReadBytes() int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "read_bytes: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
