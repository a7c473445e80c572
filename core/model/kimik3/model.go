package kimik3

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
	model.Register(model.Arch{Name: "kimi-k3", New: New, StateSize: StateSize, Activations: Activations, Experts: model.LlamaExperts})
}

type T = model.Tensor

// layer is one block: its norms and attention-residual scores, an
// attention of one kind (*kda or *mla) and an FFN of one kind (*dense or
// *sparse), each bound from the file under the block's prefix.
type layer struct {
	AttnNorm  *T `gguf:"attn_norm"`
	FFNNorm   *T `gguf:"ffn_norm"`
	AttnScore *T `gguf:"attn_res_score,optional"`
	FFNScore  *T `gguf:"ffn_res_score,optional"`

	attn attention
	ffn  ffn

	// float views of the small tensors, filled by prepare
	attnNorm, ffnNorm, attnScore, ffnScore []float32
}

// part is a layer's attention or FFN as loading sees it.
type part interface {
	// checks are the shapes llama.cpp's loader requires of the part's
	// tensors, and an error naming required tensors that are missing.
	checks(p *Params, il int) ([]shapeCheck, error)
	// prepare makes the float views of the small tensors (fl views or
	// dequantizes one) and returns the matrices, which need a dot product.
	prepare(fl func(*T) []float32) []*T
}

// attention is a layer's token mixer.
type attention interface {
	part
	// forward runs on the normed input x with layer il's memory in the
	// pass's sequence.
	forward(ps *pass, il int, x []float32) ([]float32, error)
}

// ffn is a layer's feed-forward part.
type ffn interface {
	part
	forward(ps *pass, x []float32) ([]float32, error)
}

// newLayer makes layer il's parts of the kinds p gives it.
func newLayer(p *Params, il int) layer {
	var l layer
	if p.recurrent(il) {
		l.attn = &kda{}
	} else {
		l.attn = &mlaAttn{}
	}
	if il < p.DenseLead {
		l.ffn = &dense{}
	} else {
		l.ffn = &sparse{routed: moe.Layer{Index: il}}
	}
	return l
}

// bind points the layer's tensors at w's bytes under the block's prefix.
func (l *layer) bind(w model.Weights, il int) error {
	prefix := fmt.Sprintf("blk.%d.", il)
	var attn any = l.attn
	if a, ok := l.attn.(*mlaAttn); ok {
		attn = &a.Layer
	}
	return errors.Join(model.Bind(w, prefix, l), model.Bind(w, prefix, attn), model.Bind(w, prefix, l.ffn))
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
	mla    *mla.Shape
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
	m := &Model{p: p, layers: make([]layer, p.Layers), pool: ops.NewPool(o.Threads), chunk: o.DeltaChunk, mla: p.mlaShape()}
	m.pool.SetBackend(o.Backend)
	errs := []error{model.Bind(w, "", &m.top)}
	for il := range m.layers {
		m.layers[il] = newLayer(p, il)
		errs = append(errs, m.layers[il].bind(w, il))
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
	for il, l := range m.layers {
		switch a := l.attn.(type) {
		case *kda:
			r := &state.Recurrent{SSM: make([]float32, p.Heads*p.KDAHead*p.KDAHead)}
			for range 3 {
				r.Conv = append(r.Conv, make([]float32, dInner*(p.ConvK-1)))
			}
			s.Rec[il] = r
		case *mlaAttn:
			s.Cache[il] = &state.HalfRows{Stride: m.mla.CacheStride(a.Expanded())}
		}
	}
	return s
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
		perToken += 2 * int64(p.mlaShape().CacheStride(expanded))
	}
	return fixed, perToken, nil
}

func mat(t *T) ops.Matrix { return t.Matrix() }

// Activations bounds the working memory of one forward call of the model
// in c, including what a kernels plugin's arena holds. A call longer than
// a row range (chunked.go) keeps per token only the residual stream, the
// banked inputs of the attention residuals and, in an MoE layer, the
// router logits, the routed experts' input, routing and per-slot outputs;
// every other buffer lives for one range of at most maxSubRows rows (in a
// kernels plugin's arena, which needs no copies of them) and is counted in
// fixed bytes with two more rows of the embedding width (the Go buffers of
// a range: attention-residual mixes, the arena's copies of the few a
// product reads or writes), the expert runner's group buffers and one row
// of logits. It follows the buffers forward.go, chunked.go,
// kda.go, mla.go, ffn.go and moe.Runner allocate, rounded up. A call of
// at most maxSubRows rows runs in one piece, within the same bound.
func Activations(c model.Config, w model.Weights) (fixed, perToken int64, err error) {
	p, err := readParams(c)
	if err != nil {
		return 0, 0, fmt.Errorf("kimi-k3: %w", err)
	}
	b := activations(p)
	var vocab int64
	if t, ok := w.Tensor("output.weight"); ok && len(t.Shape) == 2 {
		vocab = t.Shape[1]
	}
	fixed = moe.GroupBytes + 4*vocab + 4*int64(maxSubRows(0))*int64(b.rangeLive+b.rangeLayer+2*p.Embd)
	return fixed, 4 * int64(b.chunkLive+b.chunkMoE), nil
}

// actBreakdown is the working memory of a forward call in floats per
// token: what lives for the whole call (the streams and banked inputs;
// the MoE layers' logits, expert input, routing and per-slot outputs)
// and what lives for one row range (the streams a range step makes, the
// largest layer's scratch).
type actBreakdown struct {
	chunkLive, chunkMoE, slots int
	rangeLive, rangeLayer      int
}

func activations(p *Params) actBreakdown {
	E, H := p.Embd, p.Heads
	var b actBreakdown
	banks := 0
	if p.ResBlock > 0 {
		banks = (p.Layers + p.ResBlock - 1) / p.ResBlock
	}
	// the stream, the stream after a banked layer's attention, the final
	// mix, and a banked input per attention-residual block
	b.chunkLive = (banks + 2) * E
	// a range's mixed inputs and normed copies
	b.rangeLive = 4 * E
	for il := range p.Layers {
		var attn int
		if p.recurrent(il) {
			di := H * p.KDAHead
			attn = 9*di + p.KDAHead + H + E
		} else {
			kd, vd, kv := p.kDim(), p.vDim(), p.KVLora
			attn = p.QLora + 2*H*kd + kv + p.Rot + 2*H*vd + H*(kv+p.Rot) + H*(kd-p.Rot) +
				3*H*max(kv, kd) + 2*H*vd + H*vd + E
		}
		var ffn int
		if il < p.DenseLead {
			ffn = 2*p.FF[il] + E
		} else {
			lat, k := p.latent(), p.Router.Used
			// whole call: router logits, the experts' input, routing (ids,
			// weights, rows) and per-slot outputs
			b.chunkMoE = max(b.chunkMoE, p.Router.Experts+lat+3*k+k*lat)
			b.slots = max(b.slots, k*lat)
			// a range: the latent projection, the shared experts, the
			// slots' sum and the up projection
			ffn = lat + 2*p.FFExp*max(p.Shared, 1) + E + lat + E
		}
		b.rangeLayer = max(b.rangeLayer, 2*E+attn+ffn)
	}
	return b
}
