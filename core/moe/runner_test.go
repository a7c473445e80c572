package moe

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/quant"
)

// f32Tensor is a random F32 tensor of the given ggml shape.
func f32Tensor(rng *rand.Rand, name string, shape ...int64) *model.Tensor {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(rng.Float32()*2-1))
	}
	return &model.Tensor{TensorInfo: gguf.TensorInfo{Name: name, Type: quant.F32, Shape: shape, Size: 4 * n}, Data: data}
}

func floats(t *model.Tensor) []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

// plainLayer is a qwen3moe-shaped layer: experts at the model width with
// SiLU, softmax gating over normalised weights, no bias.
const embd, ff, nExp, used = 8, 6, 6, 2

func plainLayer(seed uint64) (*Layer, Router) {
	rng := rand.New(rand.NewPCG(seed, 1))
	l := &Layer{
		Index:    3,
		GateInp:  f32Tensor(rng, "blk.3.ffn_gate_inp.weight", embd, nExp),
		GateExps: f32Tensor(rng, "blk.3.ffn_gate_exps.weight", embd, ff, nExp),
		UpExps:   f32Tensor(rng, "blk.3.ffn_up_exps.weight", embd, ff, nExp),
		DownExps: f32Tensor(rng, "blk.3.ffn_down_exps.weight", ff, embd, nExp),
	}
	return l, Router{Experts: nExp, Used: used, Gating: GatingSoftmax, NormWeights: true}
}

func silu(gate, up []float32) {
	for i, g := range gate {
		gate[i] = ops.SiLU(g) * up[i]
	}
}

// naive is the layer's output computed token by token, expert by expert.
func naive(l *Layer, r Router, x []float32, n int) []float32 {
	dot := func(w []float32, row int, v []float32) float32 {
		var s float32
		for j, a := range v {
			s += w[row*len(v)+j] * a
		}
		return s
	}
	gi, g, u, d := floats(l.GateInp), floats(l.GateExps), floats(l.UpExps), floats(l.DownExps)
	out := make([]float32, n*embd)
	var sc Scratch
	for t := range n {
		xt := x[t*embd : (t+1)*embd]
		logits := make([]float32, nExp)
		for e := range logits {
			logits[e] = dot(gi, e, xt)
		}
		ids, ws := make([]int32, used), make([]float32, used)
		r.Route(logits, nil, ids, ws, &sc)
		for s, id := range ids {
			h := make([]float32, ff)
			for i := range h {
				h[i] = ops.SiLU(dot(g, int(id)*ff+i, xt)) * dot(u, int(id)*ff+i, xt)
			}
			for o := range embd {
				out[t*embd+o] += ws[s] * dot(d, int(id)*embd+o, h)
			}
		}
	}
	return out
}

// TestRunnerPlain: an architecture with plain experts (no latent
// projection, SiLU, softmax gating) gets from FFN (Route and Run) what a
// naive token-by-token evaluation gives.
func TestRunnerPlain(t *testing.T) {
	l, router := plainLayer(1)
	r := &Runner{Router: router, Act: silu, Pool: ops.NewPool(2)}
	const n = 5
	rng := rand.New(rand.NewPCG(2, 2))
	x := make([]float32, n*embd)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	got, err := r.FFN(l, x, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff(naive(l, router, x, n), got, cmpopts.EquateApprox(0, 1e-5)); d != "" {
		t.Errorf("output (-naive +runner):\n%s", d)
	}
}

// source serves a layer's experts from its full tensors, holding at most
// max experts at once, and logs the calls.
type source struct {
	l      *Layer
	max    int
	log    []string
	pinned int
}

func (s *source) Routed(name string) bool { return false }
func (s *source) HintExperts(layer int, experts []int32, speculative bool) error {
	s.log = append(s.log, fmt.Sprintf("hint %d %v %v", layer, experts, speculative))
	return nil
}
func (s *source) MaxExperts(layer int) int { return s.max }
func (s *source) Lookahead() int           { return 1 }
func (s *source) OnRemap(func() error)     {}

func (s *source) AcquireExperts(layer int, tensors []string, experts []int32) (ExpertSet, error) {
	s.log = append(s.log, fmt.Sprintf("acquire %d %v", layer, experts))
	if len(experts) > s.max || s.pinned > 0 {
		return nil, fmt.Errorf("%d experts asked with %d pinned, budget %d", len(experts), s.pinned, s.max)
	}
	byName := map[string]*model.Tensor{s.l.GateExps.Name: s.l.GateExps, s.l.UpExps.Name: s.l.UpExps, s.l.DownExps.Name: s.l.DownExps}
	set := &set{s: s}
	for _, name := range tensors {
		tn := byName[name]
		per := len(tn.Data) / int(tn.Shape[2])
		for _, e := range experts {
			set.data = append(set.data, slices.Clone(tn.Data[int(e)*per:(int(e)+1)*per]))
		}
	}
	set.n = len(experts)
	s.pinned += len(experts)
	return set, nil
}

type set struct {
	s    *source
	n    int
	data [][]byte
}

func (x *set) Bytes(t, i int) []byte { return x.data[t*x.n+i] }
func (x *set) Release() error {
	x.s.pinned -= x.n
	x.s.log = append(x.s.log, "release")
	return nil
}

// TestRunnerStreaming: with a source that holds two experts at a time,
// the runner hints the layer's choice, then acquires the chosen experts in
// parts of two (hinting each next part before running the current one),
// releases each part, reads every expert once, and computes exactly what
// it computes from the mapped tensors. Predict hints speculatively.
func TestRunnerStreaming(t *testing.T) {
	l, router := plainLayer(3)
	const n = 7
	rng := rand.New(rand.NewPCG(4, 4))
	x := make([]float32, n*embd)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	plain := &Runner{Router: router, Act: silu, Pool: ops.NewPool(2)}
	b, err := plain.Route(l, x, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := plain.Run(l, b, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Experts) < 5 {
		t.Fatalf("only %d experts chosen; the test wants three parts", len(b.Experts))
	}

	src := &source{l: l, max: 2}
	r := &Runner{Router: router, Act: silu, Pool: ops.NewPool(2), Source: src}
	if r.Lookahead() != 1 {
		t.Errorf("lookahead %d", r.Lookahead())
	}
	sb, err := r.Route(l, x, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Run(l, sb, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("streamed output (-mapped +streamed):\n%s", d)
	}
	// The source holds 2 experts: each is acquired alone (a quarter of
	// the window, at least one) and computed while the next one, hinted
	// as its acquire returns, is read.
	e := b.Experts
	wantLog := []string{fmt.Sprintf("hint 3 %v false", e)}
	for i := range e {
		wantLog = append(wantLog, fmt.Sprintf("acquire 3 %v", e[i:i+1]))
		if i+2 <= len(e) && i >= 1 {
			wantLog = append(wantLog, fmt.Sprintf("hint 3 %v false", e[i+1:i+2]))
		}
		wantLog = append(wantLog, "release")
	}
	if d := gocmp.Diff(wantLog, src.log); d != "" {
		t.Errorf("source calls (-want +got):\n%s", d)
	}
	src.log = nil
	if err := r.Predict(l, x, n, nil); err != nil {
		t.Fatal(err)
	}
	// A batch's guess is its chosen experts, most weight first, cut to a
	// third of what the source holds (at least one).
	w := map[int32]float32{}
	for i, id := range b.IDs {
		w[id] += b.Weights[i]
	}
	ranked := slices.Clone(e)
	slices.SortStableFunc(ranked, func(x, y int32) int { return cmp.Compare(w[y], w[x]) })
	if d := gocmp.Diff([]string{fmt.Sprintf("hint 3 %v true", ranked[:1])}, src.log); d != "" {
		t.Errorf("predict (-want +got):\n%s", d)
	}
	// When the layer is routed, the guessed expert is computed first; the
	// output does not change.
	src.log = nil
	sb, err = r.Route(l, x, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ranked[0] == e[0] {
		t.Fatalf("the test wants a guessed expert that is not the lowest id (ranked %v)", ranked)
	}
	if sb.Experts[0] != ranked[0] {
		t.Errorf("first expert after the guess %d, want the guessed %d (experts %v)", sb.Experts[0], ranked[0], sb.Experts)
	}
	if got, err = r.Run(l, sb, x, nil); err != nil {
		t.Fatal(err)
	}
	if d := gocmp.Diff(want, got); d != "" {
		t.Errorf("streamed output after a guess (-mapped +streamed):\n%s", d)
	}
}

// readySource is a source that holds some experts already (resident)
// and hands them over without waiting (ReadySource); every expert it
// hands over stays resident.
type readySource struct {
	*source
	resident map[int32]bool
}

func (s *readySource) AcquireReady(layer int, tensors []string, experts []int32, wait int) (ExpertSet, []int, error) {
	var ready []int
	for i, e := range experts {
		if i < wait || s.resident[e] {
			ready = append(ready, i)
		}
	}
	set, err := s.AcquireExperts(layer, tensors, pick(experts, ready))
	for _, i := range ready {
		s.resident[experts[i]] = true
	}
	return set, ready, err
}

// TestRunnerResidentFirst: from a source that says which experts it holds
// (ReadySource), the first round computes the first chosen expert with
// every resident one, later rounds one expert each as its read is waited
// for; each expert is acquired once, never more than the source holds
// are pinned, and the output is bit for bit the mapped tensors' (the
// experts' outputs are still added in slot order).
func TestRunnerResidentFirst(t *testing.T) {
	l, router := plainLayer(3)
	const n = 7
	rng := rand.New(rand.NewPCG(4, 4))
	x := make([]float32, n*embd)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	plain := &Runner{Router: router, Act: silu, Pool: ops.NewPool(2)}
	b, err := plain.Route(l, x, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := plain.Run(l, b, x, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := b.Experts
	if len(e) < 5 {
		t.Fatalf("only %d experts chosen; the test wants five", len(e))
	}
	for _, tc := range []struct {
		name string
		max  int
		log  []string
	}{
		// Everything fits: e[2] and e[4] go with e[0], then one by one.
		{"window", 8, func() []string {
			log := []string{fmt.Sprintf("hint 3 %v false", e), fmt.Sprintf("acquire 3 %v", []int32{e[0], e[2], e[4]}), "release"}
			for i := range e {
				if i != 0 && i != 2 && i != 4 {
					log = append(log, fmt.Sprintf("acquire 3 %v", e[i:i+1]), "release")
				}
			}
			return log
		}()},
		// Two at a time: the window is e[0] and e[1], so e[2] and e[4]
		// wait for theirs; each acquire hints the next expert.
		{"tight", 2, func() []string {
			log := []string{fmt.Sprintf("hint 3 %v false", e)}
			for i := range e {
				log = append(log, fmt.Sprintf("acquire 3 %v", e[i:i+1]))
				if i+2 <= len(e) && i >= 1 {
					log = append(log, fmt.Sprintf("hint 3 %v false", e[i+1:i+2]))
				}
				log = append(log, "release")
			}
			return log
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &readySource{source: &source{l: l, max: tc.max}, resident: map[int32]bool{e[2]: true, e[4]: true}}
			r := &Runner{Router: router, Act: silu, Pool: ops.NewPool(2), Source: src}
			sb, err := r.Route(l, x, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Run(l, sb, x, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := gocmp.Diff(want, got); d != "" {
				t.Errorf("output (-mapped +resident first):\n%s", d)
			}
			if d := gocmp.Diff(tc.log, src.log); d != "" {
				t.Errorf("source calls (-want +got):\n%s", d)
			}
		})
	}
}

// TestSpeculationCount: a one-token guess is hinted only as far as the
// measured precision of its ranks keeps the expected wrong reads within
// wasteShare of the token's experts: the top guess alone before anything
// is known and on a router that guesses like chance, more ranks as they
// prove right, never past the room given.
func TestSpeculationCount(t *testing.T) {
	guess := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	var s speculation
	if n := s.count(16, 16); n != 1 {
		t.Errorf("before any outcome: %d guesses", n)
	}
	var bad speculation
	for i := range 200 {
		bad.remember(5, guess)
		bad.score(5, []int32{int32(i % 16), 100, 101, 102}) // one rank in 16 right
	}
	if n := bad.count(16, 16); n != 1 {
		t.Errorf("precision 1/16: %d guesses", n)
	}
	var good speculation
	for range 200 {
		good.remember(5, guess)
		good.score(5, append(slices.Clone(guess[:12]), 200, 201, 202, 203)) // ranks 0-11 right
	}
	if n := good.count(16, 16); n < 8 || n > 13 {
		t.Errorf("ranks 0-11 always right: %d guesses", n)
	}
	if n := good.count(16, 3); n != 3 {
		t.Errorf("room 3: %d guesses", n)
	}
	if p := good.precision(0); p < 0.95 {
		t.Errorf("rank 0 precision %.3f", p)
	}
}
