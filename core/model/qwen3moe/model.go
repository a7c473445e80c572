// Package qwen3moe is the Qwen3 MoE forward pass (general.architecture
// "qwen3moe": Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-480B), following
// llama.cpp's src/models/qwen3moe.cpp: grouped-query attention with
// per-head Q/K RMS norms and NEOX rotary positions (core/model/gqa), and a
// routed SwiGLU MoE with softmax gating over all experts, top-k and the
// chosen weights normalised (core/moe), no shared experts.
package qwen3moe

import (
	"errors"
	"fmt"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/gqa"
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/state"
)

// Arch is the general.architecture this package runs.
const Arch = "qwen3moe"

func init() {
	model.Register(model.Arch{Name: Arch, New: New, StateSize: StateSize, Experts: model.LlamaExperts})
}

type T = model.Tensor

// Params are the hyperparameters, read as llama.cpp reads them for
// LLM_ARCH_QWEN3MOE.
type Params struct {
	Attn   gqa.Params
	Layers int
	FFExp  int // expert_feed_forward_length
	// Router is softmax over all experts, top expert_used_count, the
	// chosen weights normalised: qwen3moe.cpp passes norm_w = true and no
	// scale whatever the file's expert_weights_norm/scale say.
	Router moe.Router
}

func readParams(c model.Config) (*Params, error) {
	attn, err := gqa.ReadParams(c, true) // LLAMA_ROPE_TYPE_NEOX
	if err != nil {
		return nil, err
	}
	p := &Params{Attn: *attn, Layers: int(c.Uint("block_count", 0))}
	if p.Layers <= 0 {
		return nil, fmt.Errorf("block_count %d", p.Layers)
	}
	if attn.KDim != attn.VDim || attn.Rope.Dims != attn.KDim {
		// GGML_ASSERTs of the graph
		return nil, fmt.Errorf("key length %d, value length %d and rope dimensions %d must be equal", attn.KDim, attn.VDim, attn.Rope.Dims)
	}
	used, err := uniformInt(c, "expert_used_count")
	if err != nil {
		return nil, err
	}
	p.Router = moe.Router{Experts: int(c.Uint("expert_count", 0)), Used: used, Gating: moe.GatingSoftmax, NormWeights: true}
	if err := p.Router.Validate(); err != nil {
		return nil, err
	}
	ffExp, err := uniformInt(c, "expert_feed_forward_length")
	if err != nil && c.Has("expert_feed_forward_length") {
		return nil, err
	}
	if ffExp == 0 {
		ff, _ := uniformInt(c, "feed_forward_length")
		ffExp = ff / p.Router.Used
	}
	if ffExp <= 0 {
		return nil, errors.New("no expert_feed_forward_length (nor feed_forward_length)")
	}
	p.FFExp = ffExp
	return p, c.Err()
}

// uniformInt reads a per-layer key that qwen3moe keeps equal on every
// layer; 0 when absent.
func uniformInt(c model.Config, key string) (int, error) {
	v := c.Ints(key)
	if v == nil {
		return 0, fmt.Errorf("missing key %q", key)
	}
	for _, x := range v[1:] {
		if x != v[0] {
			return 0, fmt.Errorf("key %q varies by layer (%v), which qwen3moe does not support", key, v)
		}
	}
	return int(v[0]), nil
}

// layer is one block: attention and the routed MoE FFN.
type layer struct {
	AttnNorm *T `gguf:"attn_norm"`
	FFNNorm  *T `gguf:"ffn_norm"`
	Router   *T `gguf:"ffn_gate_inp"`
	GateExps *T `gguf:"ffn_gate_exps"`
	UpExps   *T `gguf:"ffn_up_exps"`
	DownExps *T `gguf:"ffn_down_exps"`

	attn   gqa.Layer
	routed moe.Layer

	attnNorm, ffnNorm []float32
}

type top struct {
	Embd    *T `gguf:"token_embd"`
	OutNorm *T `gguf:"output_norm"`
	Output  *T `gguf:"output,optional"` // absent: tied to token_embd
	outNorm []float32
}

// Model is a loaded Qwen3 MoE.
type Model struct {
	p      *Params
	vocab  int
	top    top
	layers []layer
	pool   *ops.Pool
	// experts runs the routed experts; when a stager serves them
	// (experts.Source), the *_exps tensors carry no data.
	experts *moe.Runner
}

// New binds a qwen3moe file's tensors and checks their shapes.
func New(c model.Config, w model.Weights, o model.Options) (model.Model, error) {
	p, err := readParams(c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Arch, err)
	}
	m := &Model{p: p, layers: make([]layer, p.Layers), pool: ops.NewPool(o.Threads)}
	m.pool.SetBackend(o.Backend)
	ff := p.FFExp
	m.experts = &moe.Runner{
		Router: p.Router,
		Act: func(gate, up []float32) {
			for r := 0; r+ff <= len(gate); r += ff { // ggml's vector groups restart each row
				ops.SwiGLU(gate[r:r+ff], up[r:r+ff])
			}
		},
		Pool:   m.pool,
		Source: moe.SourceOf(w),
	}
	if err := m.bind(w); err != nil {
		return nil, fmt.Errorf("%s: %w", Arch, err)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", Arch, err)
	}
	if err := m.prepare(); err != nil {
		return nil, fmt.Errorf("%s: %w", Arch, err)
	}
	if src := m.experts.Source; src != nil {
		// a restarted stager moved the always-needed bytes: bind again
		src.OnRemap(func() error {
			if err := m.bind(w); err != nil {
				return fmt.Errorf("%s: rebind: %w", Arch, err)
			}
			return m.prepare()
		})
	}
	return m, nil
}

// bind points every tensor at w's current bytes.
func (m *Model) bind(w model.Weights) error {
	errs := []error{model.Bind(w, "", &m.top)}
	for il := range m.layers {
		l := &m.layers[il]
		prefix := fmt.Sprintf("blk.%d.", il)
		errs = append(errs, model.Bind(w, prefix, l), model.Bind(w, prefix, &l.attn))
		l.routed = moe.Layer{Index: il, GateInp: l.Router, GateExps: l.GateExps, UpExps: l.UpExps, DownExps: l.DownExps}
	}
	return errors.Join(errs...)
}

// check verifies the shapes llama.cpp's load_arch_tensors requires.
func (m *Model) check() error {
	p := m.p
	e := int64(p.Attn.Embd)
	if s := m.top.Embd.Shape; len(s) != 2 || s[0] != e {
		return fmt.Errorf("tensor %q: shape %v, want [%d n_vocab]", m.top.Embd.Name, s, e)
	}
	m.vocab = int(m.top.Embd.Shape[1])
	v, ne, ff := int64(m.vocab), int64(p.Router.Experts), int64(p.FFExp)
	errs := []error{m.top.OutNorm.CheckShape(e)}
	if m.top.Output != nil {
		errs = append(errs, m.top.Output.CheckShape(e, v))
	}
	for il := range m.layers {
		l := &m.layers[il]
		errs = append(errs, l.attn.Check(&p.Attn, il, true),
			l.AttnNorm.CheckShape(e), l.FFNNorm.CheckShape(e), l.Router.CheckShape(e, ne),
			l.GateExps.CheckShape(e, ff, ne), l.UpExps.CheckShape(e, ff, ne), l.DownExps.CheckShape(ff, e, ne))
	}
	return errors.Join(errs...)
}

// prepare makes float views of the small tensors and checks that every
// matrix has a dot product.
func (m *Model) prepare() error {
	var errs []error
	fl := func(t *T) []float32 {
		f, err := t.Floats()
		errs = append(errs, err)
		return f
	}
	m.top.outNorm = fl(m.top.OutNorm)
	mats := []*T{m.output()}
	for il := range m.layers {
		l := &m.layers[il]
		l.attnNorm, l.ffnNorm = fl(l.AttnNorm), fl(l.FFNNorm)
		am, err := l.attn.Prepare()
		errs = append(errs, err)
		mats = append(mats, am...)
		mats = append(mats, l.Router)
		for _, t := range []*T{l.GateExps, l.UpExps, l.DownExps} {
			w := t.Matrix()
			if m.experts.Routed(t.Name) {
				w.Rows = 0 // a stager serves the bytes expert by expert
			}
			if err := w.Check(); err != nil {
				errs = append(errs, fmt.Errorf("tensor %q: %w", t.Name, err))
			}
		}
	}
	errs = append(errs, gqa.CheckMatrices(mats))
	return errors.Join(errs...)
}

// output is the lm head: output.weight, or token_embd when tied.
func (m *Model) output() *T {
	if m.top.Output != nil {
		return m.top.Output
	}
	return m.top.Embd
}

// Params implements model.Model.
func (m *Model) Params() model.Params {
	return model.Params{Arch: Arch, Vocab: m.vocab, Embd: m.p.Attn.Embd, Layers: m.p.Layers}
}

// NewState implements model.Model: a KV cache per layer.
func (m *Model) NewState() model.State {
	s := &state.Sequence{Cache: make([]*state.HalfRows, m.p.Layers), Rec: make([]*state.Recurrent, m.p.Layers)}
	for il := range s.Cache {
		s.Cache[il] = &state.HalfRows{Stride: m.p.Attn.CacheStride()}
	}
	return s
}

// StateSize is what one sequence holds: nothing fixed, and every layer's
// F16 keys and values per cached position.
func StateSize(c model.Config, _ model.Weights) (fixed, perToken int64, err error) {
	p, err := readParams(c)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", Arch, err)
	}
	return 0, 2 * int64(p.Layers) * int64(p.Attn.CacheStride()), nil
}

// Experts is the runner of the model's routed experts (tools set its
// Trace to measure the routing: k3 inspect --routing).
func (m *Model) Experts() *moe.Runner { return m.experts }
