// Package local is a server.Backend that runs a GGUF model in this process
// with the core packages: tokenizer, chat template, model forward pass
// (engine.Runner) and sampler. It keeps one sequence and reuses it when a
// request's prompt extends it.
package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	_ "github.com/k3-inference/k3/core/model/kimik3" // the architectures k3 runs
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/tokenizer"
)

// Options are the run-time settings of a local backend.
type Options struct {
	ID      string // model id; default the file name without .gguf
	Threads int    // <= 0: one per CPU
	Context int    // tokens per sequence; <= 0: the model's training context
	UBatch  int    // prompt tokens per forward call; <= 0: engine.DefaultUBatch
	Budget  int64  // memory budget in bytes, reported in stats
}

// Backend runs one model; Generate calls are serialised.
type Backend struct {
	f    *gguf.File
	tok  *tokenizer.Tokenizer
	tmpl *chat.Template
	m    model.Model
	info server.ModelInfo
	opts Options

	mu   sync.Mutex // guards the sequence below
	run  *engine.Runner
	seen []int32   // tokens the sequence holds
	last []float32 // logits after the last of them
}

// Open loads the model at path (the first shard of a split set).
func Open(path string, o Options) (*Backend, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	b, err := load(f, path, o)
	if err != nil {
		f.Close()
		return nil, err
	}
	return b, nil
}

func load(f *gguf.File, path string, o Options) (*Backend, error) {
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, fmt.Errorf("local: %s: %w", path, err)
	}
	var tmpl *chat.Template
	if src := f.String("tokenizer.chat_template", ""); src != "" {
		if tmpl, err = chat.New(src); err != nil {
			return nil, fmt.Errorf("local: %s: tokenizer.chat_template: %w", path, err)
		}
	}
	m, err := model.Load(f, model.Options{Threads: o.Threads})
	if err != nil {
		return nil, err
	}
	trained := int(f.Uint("context_length", 0))
	if o.Context <= 0 {
		o.Context = trained
	}
	if o.Context <= 0 {
		return nil, fmt.Errorf("local: %s: no context length in the file; set one", path)
	}
	if o.ID == "" {
		o.ID = modelName(path)
	}
	info := server.ModelInfo{ID: o.ID, Arch: f.Arch(), ContextLength: o.Context, Vocab: m.Params().Vocab, EOG: tok.EOG()}
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
	return &Backend{f: f, tok: tok, tmpl: tmpl, m: m, info: info, opts: o}, nil
}

// modelName strips the directory, .gguf and a -00001-of-000NN split suffix.
func modelName(path string) string {
	name := strings.TrimSuffix(filepath.Base(path), ".gguf")
	if i := strings.LastIndex(name, "-00001-of-"); i > 0 {
		name = name[:i]
	}
	return name
}

// Close releases the model file.
func (b *Backend) Close() error { return b.f.Close() }

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

// Stats reports what this process can measure without an expert cache:
// resident memory and bytes actually read from storage (/proc/self).
func (b *Backend) Stats() server.EngineStats {
	return server.EngineStats{ResidentBytes: residentBytes(), BytesRead: storageReadBytes(), BudgetBytes: b.opts.Budget}
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

var errNoLogits = errors.New("local: no logits for an empty prompt")
