package model

import (
	"fmt"
	"sort"
	"strings"
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
	String(key string, def string) string
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

// Portable is a State that can be written out whole and read back into
// another State of the same model (core/state's Sequence is one): how a
// prefix snapshot moves between sequences (the engine's slots) and to
// disk.
type Portable interface {
	// AppendBinary appends the state at its position.
	AppendBinary(b []byte) ([]byte, error)
	// UnmarshalBinary replaces the state with one AppendBinary wrote from
	// a state of the same model; on error (another shape, truncated) the
	// state is unchanged.
	UnmarshalBinary(b []byte) error
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

// Batcher is a Model that can run several sequences as one batch: the
// rows of all of them go through every matrix product and the routed
// experts together, so each weight (and each routed expert any of them
// picks) is read once per call; attention and recurrent state run per
// sequence. One token each is a decode step of several slots; more are
// the prompts of several requests prefilled at once (or both mixed).
type Batcher interface {
	// ForwardBatch appends tokens[i] to states[i] for every i and writes
	// the logits of the last token of each (len(states)*Vocab values,
	// sequence by sequence), equal bit for bit to what Forward would write
	// for each alone. After an error every state is undefined and must be
	// discarded.
	ForwardBatch(states []State, tokens [][]int32, logits []float32) error
}

// ForwardBatch runs several sequences' tokens (a decode step, prompt
// batches, or both) and writes the logits of each one's last token: as
// one batch when m is a Batcher, else one Forward per sequence.
func ForwardBatch(m Model, states []State, tokens [][]int32, logits []float32) error {
	if len(states) != len(tokens) {
		return fmt.Errorf("model: %d states for %d token runs", len(states), len(tokens))
	}
	v := m.Params().Vocab
	if len(logits) < len(states)*v {
		return fmt.Errorf("model: logits buffer of %d for %d sequences of %d", len(logits), len(states), v)
	}
	for i, t := range tokens {
		if len(t) == 0 {
			return fmt.Errorf("model: sequence %d of the batch has no tokens", i)
		}
	}
	if b, ok := m.(Batcher); ok && len(states) > 1 {
		return b.ForwardBatch(states, tokens, logits)
	}
	for i, s := range states {
		if err := m.Forward(s, tokens[i], false, logits[i*v:(i+1)*v]); err != nil {
			return err
		}
	}
	return nil
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

// Arch is what the runtime needs to know of an architecture to run it:
// how to build its model, how much memory a sequence takes, and which of
// its tensors a stager streams.
type Arch struct {
	// Name is the file's general.architecture.
	Name string
	New  New
	// StateSize is what one sequence holds, read from the file without
	// loading the model: fixed bytes (copied again by each prefix
	// snapshot) and bytes per cached position. nil: nothing is reserved
	// for the state beside the weights.
	StateSize func(c Config, w Weights) (fixed, perToken int64, err error)
	// Experts says which tensors hold routed experts, one slice per expert
	// along the last dimension, that a stager serves as the router picks
	// them (usually LlamaExperts). nil: the architecture runs only on a
	// plain mapping of the file. With it, New must accept weights that
	// are a moe.ExpertSource and read those tensors through it.
	Experts func(name string, shape []int64) bool
	// Activations bounds the working memory of a forward call: bytes per
	// token of the call (activations, scratch, routing) and fixed bytes
	// whatever its length. The runtime sizes the prefill chunk (tokens per
	// forward call) from it, so that a long prompt runs as few, large
	// chunks as the memory budget allows. nil: the default chunk.
	Activations func(c Config, w Weights) (fixed, perToken int64, err error)
}

// Staged reports whether the architecture can run through a stager.
func (a Arch) Staged() bool { return a.Experts != nil }

// LlamaExperts is llama.cpp's naming of routed experts: a tensor of two
// or more dimensions named blk.N.*_exps.* (e.g. blk.3.ffn_up_exps.weight).
func LlamaExperts(name string, shape []int64) bool {
	return strings.HasPrefix(name, "blk.") && strings.Contains(name, "_exps.") && len(shape) >= 2
}

var (
	regMu    sync.RWMutex
	registry = map[string]Arch{}
)

// Register makes an architecture available under its general.architecture
// name; architectures call it from init, and core/runtime's archs.go lists
// the packages compiled in.
func Register(a Arch) {
	regMu.Lock()
	defer regMu.Unlock()
	if a.Name == "" || a.New == nil {
		panic("model: an architecture needs a name and a constructor")
	}
	if _, dup := registry[a.Name]; dup {
		panic("model: architecture registered twice: " + a.Name)
	}
	registry[a.Name] = a
}

// Lookup returns the registration of an architecture.
func Lookup(arch string) (Arch, bool) {
	regMu.RLock()
	defer regMu.RUnlock()
	a, ok := registry[arch]
	return a, ok
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

// Find returns the registration of f's architecture, or an error naming
// the ones compiled in.
func Find(f *gguf.File) (Arch, error) {
	a, ok := Lookup(f.Arch())
	if !ok {
		return Arch{}, fmt.Errorf("model: %s: architecture %q is not supported (have %v)", f.Path(), f.Arch(), Architectures())
	}
	return a, nil
}

// Load builds the model of an open GGUF file, on a plain mapping of it,
// with the constructor registered for its architecture.
func Load(f *gguf.File, o Options) (Model, error) {
	a, err := Find(f)
	if err != nil {
		return nil, err
	}
	m, err := a.New(f, f, o)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", f.Path(), err)
	}
	return m, nil
}
