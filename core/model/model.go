package model

import (
	"fmt"
	"sort"
	"sync"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/ops"
)

// Config is a model file's metadata, read through the gguf package's typed
// accessors: short keys get the "<arch>." prefix, a missing key yields the
// default, and Err reports keys of the wrong type.
type Config interface {
	Arch() string
	Uint(key string, def uint64) uint64
	Float(key string, def float64) float64
	Bool(key string, def bool) bool
	Ints(key string) []int64
	Has(key string) bool
	Err() error
}

// Weights resolves tensors to their bytes. The gguf-backed implementation
// returns views of the mapped file; a staging backend can return its own
// memory. Nothing is copied into the Go heap either way.
type Weights interface {
	Tensor(name string) (gguf.TensorInfo, bool)
	TensorData(t gguf.TensorInfo) ([]byte, error)
}

// Params are the few numbers every caller of a model needs.
type Params struct {
	Arch   string
	Vocab  int
	Embd   int
	Layers int
}

// State is one sequence's memory inside a model (caches, recurrent
// state). Its contents are the model's business (core/state holds the
// usual kinds); the engine positions, bounds and rewinds it through these
// methods only.
type State interface {
	// Pos is the number of tokens the state has seen.
	Pos() int
	// SetContext sizes the sequence for n positions (llama.cpp's n_ctx):
	// caches grow no further, and kernels that split long caches across
	// threads split as llama.cpp does for that context.
	SetContext(n int)
	// Snapshot copies what Restore needs to come back to the current
	// position, for a later request that shares the prefix.
	Snapshot() Snapshot
	// Restore brings the state back to the position of a snapshot taken
	// from it while it held the same first Pos() tokens it holds now. The
	// snapshot stays usable; on error the state is unchanged.
	Restore(Snapshot) error
}

// Snapshot is a State at one position.
type Snapshot interface {
	// Pos is the number of tokens the snapshot covers.
	Pos() int
	// Bytes is the memory the snapshot holds.
	Bytes() int64
}

// Model runs a forward pass.
type Model interface {
	Params() Params
	// NewState returns the memory of an empty sequence.
	NewState() State
	// Forward appends tokens to the sequence in s, processing them as one
	// batch, and writes logits: for every token (len(tokens)*Vocab values)
	// when all is set, else for the last one only. After an error the
	// state is undefined and must be discarded.
	Forward(s State, tokens []int32, all bool, logits []float32) error
}

// Options are run-time settings that do not come from the file.
type Options struct {
	Threads int // worker goroutines for matrix products; <= 0 means one per CPU
	// DeltaChunk selects how linear-attention layers run a batch: 0 token
	// by token, as llama.cpp's CPU backend does (bit-exact with it); n > 0
	// the chunkwise matrix form with chunks of n tokens (equal up to
	// rounding).
	DeltaChunk int
	// Backend runs the matrix products (nil: the core's reference ops);
	// engine.OpenKernels picks one from a profile.
	Backend ops.Backend
}

// New builds an architecture's model from a file's metadata and weights.
type New func(c Config, w Weights, o Options) (Model, error)

var (
	regMu    sync.RWMutex
	registry = map[string]New{}
)

// Register makes an architecture available under its general.architecture
// name; architectures call it from init.
func Register(arch string, fn New) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := registry[arch]; dup {
		panic("model: architecture registered twice: " + arch)
	}
	registry[arch] = fn
}

// Architectures lists the registered architecture names.
func Architectures() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Load builds the model of an open GGUF file with the constructor
// registered for its architecture.
func Load(f *gguf.File, o Options) (Model, error) {
	regMu.RLock()
	fn, ok := registry[f.Arch()]
	regMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("model: %s: architecture %q is not supported (have %v)", f.Path(), f.Arch(), Architectures())
	}
	m, err := fn(f, f, o)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", f.Path(), err)
	}
	return m, nil
}
