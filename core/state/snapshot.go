package state

import (
	"fmt"

	"github.com/k3-inference/k3/core/model"
)

// Snapshot is a sequence's state at one position, kept so that a later
// request sharing that prefix can restart from it. Attention caches only
// grow, so their rows up to the position stay valid in the live sequence
// and the snapshot keeps just their lengths; recurrent (KDA) state is
// overwritten by every token and cannot be rewound, so it is copied.
type Snapshot struct {
	n    int
	lens []int        // attention cache rows per layer (0 for recurrent layers)
	rec  []*Recurrent // copies; nil for attention layers
}

// Pos is the number of tokens the snapshot covers.
func (p *Snapshot) Pos() int { return p.n }

// Bytes is the memory the snapshot holds (its recurrent state copies).
func (p *Snapshot) Bytes() int64 {
	var b int64
	for _, r := range p.rec {
		if r == nil {
			continue
		}
		b += 4 * int64(len(r.SSM))
		for _, c := range r.Conv {
			b += 4 * int64(len(c))
		}
	}
	return b
}

// Snapshot implements model.State: it copies what Restore needs to bring
// s back to its current position.
func (s *Sequence) Snapshot() model.Snapshot {
	p := &Snapshot{n: s.N, lens: make([]int, len(s.Cache)), rec: make([]*Recurrent, len(s.Rec))}
	for i, c := range s.Cache {
		if c != nil {
			p.lens[i] = c.Len
		}
	}
	for i, r := range s.Rec {
		if r == nil {
			continue
		}
		cp := &Recurrent{SSM: append([]float32(nil), r.SSM...)}
		for _, c := range r.Conv {
			cp.Conv = append(cp.Conv, append([]float32(nil), c...))
		}
		p.rec[i] = cp
	}
	return p
}

// Restore implements model.State: it brings s back to the position of
// snap, which must have been taken from s while it held the same first
// snap.Pos() tokens it holds now (the caller tracks the tokens). The
// snapshot stays usable for further restores. On error s is unchanged.
func (s *Sequence) Restore(snap model.Snapshot) error {
	p, ok := snap.(*Snapshot)
	if !ok {
		return fmt.Errorf("state: snapshot %T is not a sequence's", snap)
	}
	if err := p.fits(s); err != nil {
		return err
	}
	for i, c := range s.Cache {
		if c != nil {
			c.Len = p.lens[i]
			c.Data = c.Data[:c.Len*c.Stride]
		}
	}
	for i, r := range s.Rec {
		if r == nil {
			continue
		}
		copy(r.SSM, p.rec[i].SSM)
		for j, c := range p.rec[i].Conv {
			copy(r.Conv[j], c)
		}
	}
	s.N = p.n
	return nil
}

func (p *Snapshot) fits(s *Sequence) error {
	if p.n > s.N || len(p.lens) != len(s.Cache) || len(p.rec) != len(s.Rec) {
		return fmt.Errorf("state: snapshot at %d of %d layers does not fit a sequence at %d of %d layers", p.n, len(p.lens), s.N, len(s.Cache))
	}
	for i, c := range s.Cache {
		if c != nil && p.lens[i] > c.Len {
			return fmt.Errorf("state: snapshot holds %d rows of layer %d, the sequence %d", p.lens[i], i, c.Len)
		}
	}
	for i, r := range s.Rec {
		src := p.rec[i]
		if (r == nil) != (src == nil) {
			return fmt.Errorf("state: snapshot and sequence disagree on layer %d's kind", i)
		}
		if r == nil {
			continue
		}
		if len(src.SSM) != len(r.SSM) || len(src.Conv) != len(r.Conv) {
			return fmt.Errorf("state: snapshot of layer %d has another recurrent shape", i)
		}
		for j, c := range src.Conv {
			if len(c) != len(r.Conv[j]) {
				return fmt.Errorf("state: snapshot of layer %d has another convolution shape", i)
			}
		}
	}
	return nil
}
