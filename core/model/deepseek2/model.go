package deepseek2

import (
	"errors"
	"fmt"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/mla"
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/state"
)

func init() {
	model.Register(model.Arch{Name: "deepseek2", New: New, StateSize: StateSize, Experts: model.LlamaExperts})
}

type T = model.Tensor

// layer is one block: MLA attention and an FFN of one kind (*dense or
// *sparse), each bound from the file under the block's prefix.
type layer struct {
	AttnNorm *T `gguf:"attn_norm"`
	FFNNorm  *T `gguf:"ffn_norm"`
	attn     mla.Layer
	ffn      ffn

	attnNorm, ffnNorm []float32
}

// ffn is a layer's feed-forward part.
type ffn interface {
	checks(p *Params, il int) ([]model.ShapeCheck, error)
	// prepare makes the float views of the small tensors and returns the
	// matrices, which need a dot product.
	prepare(fl func(*T) []float32) []*T
	forward(ps *pass, x []float32) ([]float32, error)
}

type top struct {
	Embd    *T `gguf:"token_embd"`
	OutNorm *T `gguf:"output_norm"`
	// Output falls back to the token embedding (tied embeddings).
	Output  *T `gguf:"output,optional"`
	outNorm []float32
}

// Model is a loaded deepseek2 file.
type Model struct {
	p      *Params
	vocab  int
	top    top
	layers []layer
	pool   *ops.Pool
	// experts runs the routed experts of the MoE layers (and, with their
	// SiLU, the dense and shared FFNs); when a stager serves the routed
	// experts (experts.Source), the *_exps tensors carry no data.
	experts *moe.Runner
}

// New binds a deepseek2 file's tensors and checks their shapes.
func New(c model.Config, w model.Weights, o model.Options) (model.Model, error) {
	p, err := readParams(c)
	if err != nil {
		return nil, fmt.Errorf("deepseek2: %w", err)
	}
	m := &Model{p: p, layers: make([]layer, p.Layers), pool: ops.NewPool(o.Threads)}
	m.pool.SetBackend(o.Backend)
	for il := range m.layers {
		if il < p.DenseLead {
			m.layers[il].ffn = &dense{}
		} else {
			m.layers[il].ffn = &sparse{routed: moe.Layer{Index: il}}
		}
	}
	if err := m.bind(w); err != nil {
		return nil, fmt.Errorf("deepseek2: %w", err)
	}
	m.experts = &moe.Runner{Router: p.Router, Act: ops.SwiGLU, Pool: m.pool, Source: moe.SourceOf(w)}
	if src := m.experts.Source; src != nil {
		src.OnRemap(func() error {
			if err := m.bind(w); err != nil {
				return fmt.Errorf("deepseek2: rebind: %w", err)
			}
			return m.prepare()
		})
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("deepseek2: %w", err)
	}
	if err := m.prepare(); err != nil {
		return nil, fmt.Errorf("deepseek2: %w", err)
	}
	return m, nil
}

// bind points every tensor at w's current bytes.
func (m *Model) bind(w model.Weights) error {
	errs := []error{model.Bind(w, "", &m.top)}
	if m.top.Output == nil && m.top.Embd != nil {
		m.top.Output = m.top.Embd
	}
	for il := range m.layers {
		l := &m.layers[il]
		prefix := fmt.Sprintf("blk.%d.", il)
		errs = append(errs, model.Bind(w, prefix, l), model.Bind(w, prefix, &l.attn), model.Bind(w, prefix, l.ffn))
	}
	return errors.Join(errs...)
}

// check verifies what llama.cpp's load_arch_tensors requires: presence
// per layer kind, the layout the metadata announces, and exact shapes.
func (m *Model) check() error {
	p := m.p
	e := int64(p.Embd)
	if len(m.top.Embd.Shape) != 2 || m.top.Embd.Shape[0] != e {
		return fmt.Errorf("tensor %q: shape %v, want [%d n_vocab]", m.top.Embd.Name, m.top.Embd.Shape, e)
	}
	m.vocab = int(m.top.Embd.Shape[1])
	v := int64(m.vocab)
	checks := []model.ShapeCheck{{T: m.top.OutNorm, Shape: []int64{e}}, {T: m.top.Output, Shape: []int64{e, v}}}
	var errs []error
	for il := range m.layers {
		l := &m.layers[il]
		checks = append(checks, model.ShapeCheck{T: l.AttnNorm, Shape: []int64{e}}, model.ShapeCheck{T: l.FFNNorm, Shape: []int64{e}})
		if l.attn.Expanded() == p.Absorbed {
			want := map[bool]string{true: "attn_k_b and attn_v_b", false: "attn_kv_b"}[p.Absorbed]
			errs = append(errs, fmt.Errorf("layer %d: the *_mla head sizes announce %s", il, want))
		}
		if (l.attn.QA != nil) != (p.MLA.QLora > 0) {
			errs = append(errs, fmt.Errorf("layer %d: attention.q_lora_rank %d does not match the q tensors", il, p.MLA.QLora))
		}
		cs, err := l.attn.Checks(&p.MLA, il)
		checks, errs = append(checks, cs...), append(errs, err)
		cs, err = l.ffn.checks(p, il)
		checks, errs = append(checks, cs...), append(errs, err)
	}
	for _, c := range checks {
		if c.T == nil {
			continue // reported as missing
		}
		if err := c.T.CheckShape(c.Shape...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// prepare makes float views of the small tensors and checks that every
// matrix has a dot product.
func (m *Model) prepare() error {
	var errs []error
	fl := func(t *T) []float32 {
		if t == nil {
			return nil
		}
		f, err := t.Floats()
		if err != nil {
			errs = append(errs, err)
		}
		return f
	}
	m.top.outNorm = fl(m.top.OutNorm)
	mats := []*T{m.top.Output}
	for il := range m.layers {
		l := &m.layers[il]
		l.attnNorm, l.ffnNorm = fl(l.AttnNorm), fl(l.FFNNorm)
		mats = append(append(mats, l.attn.Prepare(fl)...), l.ffn.prepare(fl)...)
	}
	for _, t := range mats {
		if t == nil {
			continue
		}
		w := t.Matrix()
		if m.experts.Routed(t.Name) {
			w.Rows = 0 // a stager serves the bytes expert by expert
		}
		if err := w.Check(); err != nil {
			errs = append(errs, fmt.Errorf("tensor %q: %w", t.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Params implements model.Model.
func (m *Model) Params() model.Params {
	return model.Params{Arch: "deepseek2", Vocab: m.vocab, Embd: m.p.Embd, Layers: m.p.Layers}
}

// NewState implements model.Model: a half-precision MLA cache per layer.
func (m *Model) NewState() model.State {
	s := &state.Sequence{Cache: make([]*state.HalfRows, m.p.Layers), Rec: make([]*state.Recurrent, m.p.Layers)}
	for il := range s.Cache {
		s.Cache[il] = &state.HalfRows{Stride: m.p.MLA.CacheStride(!m.p.Absorbed)}
	}
	return s
}

// StateSize is what one sequence of the model in c holds, without loading
// it: nothing fixed, and every layer's cached row per position.
func StateSize(c model.Config, _ model.Weights) (fixed, perToken int64, err error) {
	p, err := readParams(c)
	if err != nil {
		return 0, 0, fmt.Errorf("deepseek2: %w", err)
	}
	return 0, int64(p.Layers) * 2 * int64(p.MLA.CacheStride(!p.Absorbed)), nil
}

// Experts is the runner of the model's routed experts (tools set its
// Trace to measure the routing: k3 inspect --routing).
func (m *Model) Experts() *moe.Runner { return m.experts }
