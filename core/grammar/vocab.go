package grammar

import (
	"bytes"
	"slices"
)

// Vocab is a tokenizer's vocabulary as the matcher sees it: each token's
// bytes (its text, control tokens shown), sorted once so that masks can
// share the work of common prefixes. It is read-only after NewVocab and
// shared by all matchers.
type Vocab struct {
	pieces [][]byte // by token id
	eog    []bool   // end-of-generation tokens, by id
	// The tokens with bytes that are not end-of-generation, sorted by
	// their bytes, and each one's common prefix length with the previous.
	order  []int32
	lcp    []int32
	maxLen int
	// The sorted tokens' bytes back to back (token i of order is
	// sorted[off[i]:off[i+1]]): the mask walk reads memory in order.
	sorted []byte
	off    []int32
}

// NewVocab indexes pieces (token id -> bytes); eog lists the
// end-of-generation tokens, which a grammar allows only where it may end.
// Tokens with no bytes are never allowed.
func NewVocab(pieces []string, eog []int32) *Vocab {
	v := &Vocab{pieces: make([][]byte, len(pieces)), eog: make([]bool, len(pieces))}
	for _, t := range eog {
		if t >= 0 && int(t) < len(pieces) {
			v.eog[t] = true
		}
	}
	for id, p := range pieces {
		v.pieces[id] = []byte(p)
		if p != "" && !v.eog[id] {
			v.order = append(v.order, int32(id))
			v.maxLen = max(v.maxLen, len(p))
		}
	}
	slices.SortFunc(v.order, func(a, b int32) int { return bytes.Compare(v.pieces[a], v.pieces[b]) })
	v.off = make([]int32, 0, len(v.order)+1)
	for _, id := range v.order {
		v.off = append(v.off, int32(len(v.sorted)))
		v.sorted = append(v.sorted, v.pieces[id]...)
	}
	v.off = append(v.off, int32(len(v.sorted)))
	v.lcp = make([]int32, len(v.order))
	for i := 1; i < len(v.order); i++ {
		a, b := v.pieces[v.order[i-1]], v.pieces[v.order[i]]
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		v.lcp[i] = int32(n)
	}
	return v
}

// Size is the number of tokens.
func (v *Vocab) Size() int { return len(v.pieces) }

// Piece is the bytes of token id.
func (v *Vocab) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(v.pieces) {
		return nil
	}
	return v.pieces[id]
}

// IsEOG reports whether id ends generation.
func (v *Vocab) IsEOG(id int32) bool { return id >= 0 && int(id) < len(v.eog) && v.eog[id] }

// Bitset is a set of token ids.
type Bitset []uint64

func newBitset(n int) Bitset { return make(Bitset, (n+63)/64) }

// Has reports whether id is in the set.
func (b Bitset) Has(id int32) bool {
	i := int(id) >> 6
	return id >= 0 && i < len(b) && b[i]&(1<<(uint(id)&63)) != 0
}

func (b Bitset) set(id int32) { b[id>>6] |= 1 << (uint(id) & 63) }

// Count is the number of ids in the set.
func (b Bitset) Count() int {
	n := 0
	for _, w := range b {
		for ; w != 0; w &= w - 1 {
			n++
		}
	}
	return n
}
