package kimik3

import (
	"errors"
	"fmt"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/state"
)

func init() { model.Register("kimi-k3", New) }

type T = model.Tensor

// layer names the tensors of one block; which ones are present depends on
// the layer kind (KDA or MLA, dense or MoE) and on the file.
type layer struct {
	AttnNorm  *T `gguf:"attn_norm"`
	FFNNorm   *T `gguf:"ffn_norm"`
	AttnScore *T `gguf:"attn_res_score,optional"`
	FFNScore  *T `gguf:"ffn_res_score,optional"`
	Out       *T `gguf:"attn_output"`

	// KDA
	ConvQ *T `gguf:"ssm_conv1d_q,optional"`
	ConvK *T `gguf:"ssm_conv1d_k,optional"`
	ConvV *T `gguf:"ssm_conv1d_v,optional"`
	Q     *T `gguf:"attn_q,optional"` // also MLA's direct q projection
	K     *T `gguf:"attn_k,optional"`
	V     *T `gguf:"attn_v,optional"`
	FA    *T `gguf:"ssm_f_a,optional"`
	FB    *T `gguf:"ssm_f_b,optional"`
	Beta  *T `gguf:"ssm_beta,optional"`
	A     *T `gguf:"ssm_a,bare,optional"`
	DtB   *T `gguf:"ssm_dt.bias,optional"`
	G     *T `gguf:"ssm_g,optional"`
	ONorm *T `gguf:"ssm_norm,optional"`

	// MLA
	QANorm  *T `gguf:"attn_q_a_norm,optional"`
	KVANorm *T `gguf:"attn_kv_a_norm,optional"`
	QA      *T `gguf:"attn_q_a,optional"`
	QB      *T `gguf:"attn_q_b,optional"`
	KVA     *T `gguf:"attn_kv_a_mqa,optional"`
	KVB     *T `gguf:"attn_kv_b,optional"`
	KB      *T `gguf:"attn_k_b,optional"`
	VB      *T `gguf:"attn_v_b,optional"`
	Gate    *T `gguf:"attn_gate,optional"`

	// dense FFN
	FFNGate *T `gguf:"ffn_gate,optional"`
	FFNUp   *T `gguf:"ffn_up,optional"`
	FFNDown *T `gguf:"ffn_down,optional"`

	// MoE
	Router     *T `gguf:"ffn_gate_inp,optional"`
	ProbsB     *T `gguf:"exp_probs_b.bias,optional"`
	GateExps   *T `gguf:"ffn_gate_exps,optional"`
	UpExps     *T `gguf:"ffn_up_exps,optional"`
	DownExps   *T `gguf:"ffn_down_exps,optional"`
	RoutedDown *T `gguf:"ffn_routed_down,optional"`
	RoutedUp   *T `gguf:"ffn_routed_up,optional"`
	RoutedNorm *T `gguf:"ffn_routed_norm,optional"`
	GateSh     *T `gguf:"ffn_gate_shexp,optional"`
	UpSh       *T `gguf:"ffn_up_shexp,optional"`
	DownSh     *T `gguf:"ffn_down_shexp,optional"`

	// float views of the small tensors, filled by prepare
	attnNorm, ffnNorm, attnScore, ffnScore []float32
	convQ, convK, convV, a, dtB, oNorm     []float32
	qaNorm, kvaNorm, probsB, routedNorm    []float32
	// routed is the MoE layer's routed part, as the expert runner takes it
	routed moe.Layer
}

type top struct {
	Embd     *T `gguf:"token_embd"`
	OutNorm  *T `gguf:"output_norm"`
	Output   *T `gguf:"output"`
	OutScore *T `gguf:"output_res_score,optional"`
	outNorm  []float32
	outScore []float32
}

// Model is a loaded Kimi K3.
type Model struct {
	p      *Params
	vocab  int
	top    top
	layers []layer
	pool   *ops.Pool
	chunk  int // model.Options.DeltaChunk
	// experts runs the routed experts of the MoE layers; when a stager
	// serves them (experts.Source), the *_exps tensors carry no data.
	experts *moe.Runner
}

// New binds a kimi-k3 file's tensors and checks their shapes.
func New(c model.Config, w model.Weights, o model.Options) (model.Model, error) {
	p, err := readParams(c)
	if err != nil {
		return nil, fmt.Errorf("kimi-k3: %w", err)
	}
	m := &Model{p: p, layers: make([]layer, p.Layers), pool: ops.NewPool(o.Threads), chunk: o.DeltaChunk}
	m.pool.SetBackend(o.Backend)
	errs := []error{model.Bind(w, "", &m.top)}
	for il := range m.layers {
		errs = append(errs, model.Bind(w, fmt.Sprintf("blk.%d.", il), &m.layers[il]))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("kimi-k3: %w", err)
	}
	m.experts = m.newRunner(w)
	m.useStager(w)
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("kimi-k3: %w", err)
	}
	if err := m.prepare(); err != nil {
		return nil, fmt.Errorf("kimi-k3: %w", err)
	}
	return m, nil
}

// Params implements model.Model.
func (m *Model) Params() model.Params {
	return model.Params{Arch: "kimi-k3", Vocab: m.vocab, Embd: m.p.Embd, Layers: m.p.Layers}
}

// NewState implements model.Model: a latent cache for each MLA layer and
// conv + delta-rule state for each KDA layer.
func (m *Model) NewState() model.State {
	p := m.p
	s := &state.Sequence{Cache: make([]*state.HalfRows, p.Layers), Rec: make([]*state.Recurrent, p.Layers)}
	dInner := p.Heads * p.KDAHead
	for il := range m.layers {
		if p.recurrent(il) {
			r := &state.Recurrent{SSM: make([]float32, p.Heads*p.KDAHead*p.KDAHead)}
			for range 3 {
				r.Conv = append(r.Conv, make([]float32, dInner*(p.ConvK-1)))
			}
			s.Rec[il] = r
			continue
		}
		s.Cache[il] = &state.HalfRows{Stride: m.cacheStride(il)}
	}
	return s
}

// cacheStride is the half values cached per position of an MLA layer: the
// normed latent and the pe part when absorbed, else every head's K and V.
func (m *Model) cacheStride(il int) int {
	return m.p.cacheStride(m.layers[il].KVB != nil)
}

func (p *Params) cacheStride(expanded bool) int {
	if !expanded {
		return p.KVLora + p.Rot
	}
	return p.Heads * (p.kDim() + p.vDim())
}

// recurrentFloats is the float32 values of one KDA layer's state: the
// delta-rule matrices and the three convolutions' last inputs.
func (p *Params) recurrentFloats() int {
	return p.Heads*p.KDAHead*p.KDAHead + 3*p.Heads*p.KDAHead*(p.ConvK-1)
}

// StateSize is what one sequence of the model in c and w holds, without
// loading it: fixed bytes (the KDA layers' state, which a prefix snapshot
// copies) and bytes per cached position (the MLA layers' rows).
func StateSize(c model.Config, w model.Weights) (fixed, perToken int64, err error) {
	p, err := readParams(c)
	if err != nil {
		return 0, 0, fmt.Errorf("kimi-k3: %w", err)
	}
	for il := range p.Layers {
		if p.recurrent(il) {
			fixed += 4 * int64(p.recurrentFloats())
			continue
		}
		_, expanded := w.Tensor(fmt.Sprintf("blk.%d.attn_kv_b.weight", il))
		perToken += 2 * int64(p.cacheStride(expanded))
	}
	return fixed, perToken, nil
}

func mat(t *T) ops.Matrix { return t.Matrix() }
