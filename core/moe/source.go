package moe

import "github.com/k3-inference/k3/core/model"

// ExpertSource is how a model reads routed experts when its weights come
// from a stager instead of a plain mapping of the file. The Runner calls
// it from the forward pass, one call at a time; core/engine's Staged is
// the implementation over a stager plugin.
type ExpertSource interface {
	// Routed reports whether the named tensor holds routed experts; such a
	// tensor has no TensorData, its experts come from AcquireExperts.
	Routed(name string) bool
	// HintExperts says which experts of a layer the model will need: the
	// layer's router has chosen them, or (speculative) a guess made by
	// running the layer's router early.
	HintExperts(layer int, experts []int32, speculative bool) error
	// AcquireExperts makes the given experts of the named routed tensors
	// resident and pins them until the set is released.
	AcquireExperts(layer int, tensors []string, experts []int32) (ExpertSet, error)
	// MaxExperts is how many experts of a layer one AcquireExperts may ask
	// for: a batch whose experts do not fit in the budget together runs in
	// groups of this many.
	MaxExperts(layer int) int
	// Lookahead is how many layers ahead the model should predict experts
	// and hint them (0: none). After layer L it runs the routers of L+1 ..
	// L+depth on L's output; a nearer layer's guess is remade from fresher
	// state after each layer, and the stager keeps only a layer's latest.
	Lookahead() int
	// OnRemap registers fn to run when the always-needed bytes moved (the
	// stager process was restarted): the model re-reads every TensorData.
	// No byte slice obtained before the remap may be used after fn returns.
	OnRemap(fn func() error)
}

// ReadySource is an ExpertSource that can hand over the experts it holds
// already without waiting for the others, so that the Runner computes
// those while the others are read. The order of computing does not change
// the result: every expert's output lands in its own (token, slot) row and
// Run adds them in slot order, as ggml does.
type ReadySource interface {
	// AcquireReady is AcquireExperts for experts[:wait] and, of the rest,
	// those resident now; ready lists which (indexes into experts,
	// ascending), and the set's expert i is experts[ready[i]].
	AcquireReady(layer int, tensors []string, experts []int32, wait int) (set ExpertSet, ready []int, err error)
}

// ExpertSet is the pinned bytes of one layer's acquired experts.
type ExpertSet interface {
	// Bytes is expert i (in the order asked for) of tensor t (likewise).
	Bytes(t, i int) []byte
	// Release unpins the set; its bytes must not be used afterwards.
	Release() error
}

// SourceOf returns the expert source behind w, or nil when w holds every
// tensor's bytes itself.
func SourceOf(w model.Weights) ExpertSource {
	src, _ := w.(ExpertSource)
	return src
}
