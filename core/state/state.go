// Package state holds a sequence's memory below the models: growing
// attention (KV or latent) caches, recurrent (linear-attention) state, and
// the snapshots that let a later request sharing a prefix restart from it.
// An architecture builds a Sequence in NewState and reads its layers in
// Forward; the engine sees it only as a model.State.
package state

// HalfRows is a growing attention cache of one layer: one row of Stride
// IEEE half values per position, as llama.cpp's F16 KV cache holds them.
type HalfRows struct {
	Stride int
	Data   []uint16
	Len    int
	// Max is the rows the sequence's context holds (0: unbounded):
	// growth stops there, so a full context takes no more memory than
	// its rows (the memory budget reserves that much).
	Max int
}

// Grow makes room for n more rows and returns them; the caller fills them
// and the rows count as cached at once.
func (c *HalfRows) Grow(n int) []uint16 {
	need := (c.Len + n) * c.Stride
	if cap(c.Data) < need {
		want := max(need, 2*cap(c.Data))
		if c.Max > 0 {
			want = max(need, min(want, c.Max*c.Stride))
		}
		nd := make([]uint16, need, want)
		copy(nd, c.Data)
		c.Data = nd
	}
	c.Data = c.Data[:need]
	rows := c.Data[c.Len*c.Stride : need]
	c.Len += n
	return rows
}

// Recurrent is the memory of one linear-attention (KDA) layer: the last
// inputs of each short convolution and the delta-rule state matrices,
// both float32 like llama.cpp's recurrent cache.
type Recurrent struct {
	Conv [][]float32 // per convolution (q, k, v): channels × (kernel-1)
	SSM  []float32   // heads × dim × dim
}

// Sequence is the state of one sequence across all layers of a model:
// each layer has either a cache (attention) or a recurrent state.
type Sequence struct {
	N int // tokens seen
	// Ctx is the context size llama.cpp would allocate for this sequence
	// (n_ctx, which it pads to 256). Some kernels depend on it: decode
	// attention over 512 or more cache cells is split across threads. 0
	// means unbounded.
	Ctx   int
	Cache []*HalfRows
	Rec   []*Recurrent
}

// Pos implements model.State.
func (s *Sequence) Pos() int { return s.N }

// SetContext implements model.State: the context is n positions and no
// cache grows beyond n rows.
func (s *Sequence) SetContext(n int) {
	s.Ctx = n
	for _, c := range s.Cache {
		if c != nil {
			c.Max = n
		}
	}
}
