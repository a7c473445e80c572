package grammar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// A stack is a node of a persistent linked list: the grammar position on
// top and the id of the stack below (0 is the empty stack: the grammar has
// matched all of its input). Nodes are interned, so two equal stacks have
// one id, and a set of stacks is a sorted list of ids, interned too.
type node struct {
	pos    int32
	parent int32
}

// state is where a matcher stands: a set of stacks, and the code point
// being decoded when the text so far ends inside a UTF-8 sequence.
type state struct {
	set    int32 // 0: no stack survives (the text does not match)
	cp     uint32
	remain int8 // continuation bytes still expected
}

const deadSet = 0

// sigKey memoizes a set's transition on a character: by the signature of
// the top classes it matches, or by the code point itself.
type sigKey struct {
	set    int32
	byRune bool
	sig    uint64
}

// Matcher follows generated text through a grammar and tells which tokens
// may come next. It is not safe for concurrent use; one per generation.
type Matcher struct {
	g *Grammar
	v *Vocab

	nodes    []node
	nodeID   map[uint64]int32
	expanded map[int32][]int32
	sets     [][]int32
	setID    map[string]int32
	ascii    [][]int32 // per set, the set after each ASCII character (-1: not computed)
	steps    map[sigKey]int32
	masks    map[state]Bitset

	cur state
	err error
}

// maxMasks bounds the masks a matcher keeps (each vocab/8 bytes).
const maxMasks = 256

// NewMatcher starts matching g's root rule against v's tokens.
func NewMatcher(g *Grammar, v *Vocab) *Matcher {
	m := &Matcher{g: g, v: v, nodes: []node{{pos: -1}}, nodeID: map[uint64]int32{}, expanded: map[int32][]int32{},
		setID: map[string]int32{}, steps: map[sigKey]int32{}, masks: map[state]Bitset{}}
	m.intern(nil) // set 0: dead
	var start []int32
	g.alts(g.root, func(pos int32) {
		if g.endOfSeq(pos) {
			start = append(start, 0)
			return
		}
		start = append(start, m.expand(m.push(pos, 0))...)
	})
	m.cur = state{set: m.intern(start)}
	return m
}

func (m *Matcher) push(pos, parent int32) int32 {
	key := uint64(uint32(pos))<<32 | uint64(uint32(parent))
	if id, ok := m.nodeID[key]; ok {
		return id
	}
	id := int32(len(m.nodes))
	m.nodes = append(m.nodes, node{pos, parent})
	m.nodeID[key] = id
	return id
}

// intern returns the id of the set of stacks ids (in any order, with
// repeats).
func (m *Matcher) intern(ids []int32) int32 {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	key := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(key[4*i:], uint32(id))
	}
	if id, ok := m.setID[string(key)]; ok {
		return id
	}
	id := int32(len(m.sets))
	m.sets = append(m.sets, ids)
	m.setID[string(key)] = id
	m.ascii = append(m.ascii, nil)
	return id
}

// expand turns stack s into the stacks it stands for whose top is a
// terminal (a character class or a token), or the empty stack: rule
// references on top are replaced by each of their alternatives.
func (m *Matcher) expand(s int32) []int32 {
	if s == 0 {
		return []int32{0}
	}
	if out, ok := m.expanded[s]; ok {
		return out
	}
	n := m.nodes[s]
	e := m.g.elems[n.pos]
	if e.kind != kRef {
		out := []int32{s}
		m.expanded[s] = out
		return out
	}
	below := n.parent
	if !m.g.endOfSeq(n.pos + 1) {
		below = m.push(n.pos+1, n.parent)
	}
	var out []int32
	m.g.alts(e.val, func(pos int32) {
		if m.g.endOfSeq(pos) {
			out = append(out, m.expand(below)...)
		} else {
			out = append(out, m.expand(m.push(pos, below))...)
		}
	})
	out = slices.Compact(slices.Sorted(slices.Values(out)))
	m.expanded[s] = out
	return out
}

// stepRune is the set after matching r in every stack of set.
func (m *Matcher) stepRune(set int32, r rune) int32 {
	if r < 128 {
		if t := m.ascii[set]; t != nil && t[r] >= 0 {
			return t[r]
		}
	}
	// Beyond ASCII, the next set depends only on which of the stacks' top
	// classes r is in: memoize on that signature (stacks past the 64th
	// fall back to the code point itself).
	key := sigKey{set: set, sig: uint64(r), byRune: true}
	if r >= 128 && len(m.sets[set]) <= 64 {
		key = sigKey{set: set}
		for i, s := range m.sets[set] {
			if s == 0 {
				continue
			}
			if e := m.g.elems[m.nodes[s].pos]; e.kind == kChars && m.g.classes[e.val].match(r) {
				key.sig |= 1 << i
			}
		}
	}
	next, ok := m.steps[key]
	if !ok {
		var out []int32
		for _, s := range m.sets[set] {
			if s == 0 {
				continue
			}
			n := m.nodes[s]
			e := m.g.elems[n.pos]
			if e.kind != kChars || !m.g.classes[e.val].match(r) {
				continue
			}
			below := n.parent
			if !m.g.endOfSeq(n.pos + 1) {
				below = m.push(n.pos+1, n.parent)
			}
			out = append(out, m.expand(below)...)
		}
		if len(out) > 0 {
			next = m.intern(out)
		}
		m.steps[key] = next
	}
	if r < 128 {
		if m.ascii[set] == nil {
			t := make([]int32, 128)
			for i := range t {
				t[i] = -1
			}
			m.ascii[set] = t
		}
		m.ascii[set][r] = next
	}
	return next
}

// stepByte advances st by one byte of UTF-8 text.
func (m *Matcher) stepByte(st state, b byte) state {
	if st.remain > 0 {
		if b&0xC0 != 0x80 {
			return state{}
		}
		st.cp = st.cp<<6 | uint32(b&0x3F)
		if st.remain--; st.remain > 0 {
			if !m.partialOK(st) {
				return state{}
			}
			return st
		}
		r := rune(st.cp)
		if !utf8.ValidRune(r) {
			return state{}
		}
		return state{set: m.stepRune(st.set, r)}
	}
	switch {
	case b < 0x80:
		return state{set: m.stepRune(st.set, rune(b))}
	case b&0xE0 == 0xC0 && b >= 0xC2:
		st = state{set: st.set, cp: uint32(b & 0x1F), remain: 1}
	case b&0xF0 == 0xE0:
		st = state{set: st.set, cp: uint32(b & 0x0F), remain: 2}
	case b&0xF8 == 0xF0 && b <= 0xF4:
		st = state{set: st.set, cp: uint32(b & 0x07), remain: 3}
	default:
		return state{}
	}
	if !m.partialOK(st) {
		return state{}
	}
	return st
}

// partialOK reports whether some completion of st's incomplete character
// could match the top of one of its stacks.
func (m *Matcher) partialOK(st state) bool {
	lo := rune(st.cp) << (6 * rune(st.remain))
	hi := lo | (1<<(6*rune(st.remain)) - 1)
	switch {
	case st.remain == 2 && lo < 0x800:
		lo = 0x800
	case st.remain == 3 && lo < 0x10000:
		lo = 0x10000
	}
	hi = min(hi, utf8.MaxRune)
	// Surrogates are not characters: what completes into them is invalid.
	ranges := [][2]rune{{lo, min(hi, 0xD7FF)}, {max(lo, 0xE000), hi}}
	for _, s := range m.sets[st.set] {
		if s == 0 {
			continue
		}
		e := m.g.elems[m.nodes[s].pos]
		if e.kind != kChars {
			continue
		}
		for _, r := range ranges {
			if r[0] <= r[1] && m.g.classes[e.val].matchRange(r[0], r[1]) {
				return true
			}
		}
	}
	return false
}

// ErrRejected is returned by Accept for a token the grammar does not allow
// where the matcher stands; the matcher is then dead and allows nothing.
var ErrRejected = errors.New("grammar: token not allowed here")

// Accept advances past token id.
func (m *Matcher) Accept(id int32) error {
	if m.err != nil {
		return m.err
	}
	if m.v.IsEOG(id) {
		if !m.Done() {
			return m.reject(fmt.Errorf("%w: end of generation before the grammar is complete", ErrRejected))
		}
		return nil
	}
	piece := m.v.Piece(id)
	if len(piece) == 0 {
		return m.reject(fmt.Errorf("%w: token %d has no text", ErrRejected, id))
	}
	var byToken []int32
	if m.cur.remain == 0 {
		for _, s := range m.sets[m.cur.set] {
			if s == 0 {
				continue
			}
			n := m.nodes[s]
			e := m.g.elems[n.pos]
			if (e.kind == kToken && e.val == id) || (e.kind == kNotToken && e.val != id) {
				below := n.parent
				if !m.g.endOfSeq(n.pos + 1) {
					below = m.push(n.pos+1, n.parent)
				}
				byToken = append(byToken, m.expand(below)...)
			}
		}
	}
	st := m.cur
	for _, b := range piece {
		if st = m.stepByte(st, b); st.set == deadSet {
			break
		}
	}
	if len(byToken) > 0 {
		st.set = m.intern(append(byToken, m.sets[st.set]...))
	}
	if st.set == deadSet {
		return m.reject(fmt.Errorf("%w: token %d (%q)", ErrRejected, id, piece))
	}
	m.cur = st
	return nil
}

// AcceptString advances past text that is not one token (a start the
// prompt already holds, or the part of a token after a trigger).
func (m *Matcher) AcceptString(text string) error {
	if m.err != nil {
		return m.err
	}
	st := m.cur
	for i := 0; i < len(text); i++ {
		if st = m.stepByte(st, text[i]); st.set == deadSet {
			return m.reject(fmt.Errorf("%w: text %q", ErrRejected, text))
		}
	}
	m.cur = st
	return nil
}

func (m *Matcher) reject(err error) error {
	m.err = err
	m.cur = state{}
	return err
}

// Err is the error that killed the matcher, nil while it lives.
func (m *Matcher) Err() error { return m.err }

// Done reports whether the text so far is a complete match of the grammar.
func (m *Matcher) Done() bool {
	return m.err == nil && m.cur.remain == 0 && slices.Contains(m.sets[m.cur.set], 0)
}

// Allowed is the set of tokens that may come next. The returned set is
// the matcher's (cached); do not change it.
func (m *Matcher) Allowed() Bitset {
	if b, ok := m.masks[m.cur]; ok {
		return b
	}
	b := m.compute(m.cur)
	if len(m.masks) >= maxMasks {
		clear(m.masks)
	}
	m.masks[m.cur] = b
	return b
}

// Mask sets the logits of the tokens not allowed next to -Inf; logits
// past the vocabulary are not allowed either.
func (m *Matcher) Mask(logits []float32) {
	b := m.Allowed()
	inf := float32(math.Inf(-1))
	for i := range logits {
		if i>>6 >= len(b) || b[i>>6]&(1<<(uint(i)&63)) == 0 {
			logits[i] = inf
		}
	}
}

// compute walks the sorted vocabulary from st: each token extends the
// states of the longest prefix it shares with the previous token, and a
// prefix no stack survives skips every token that starts with it.
func (m *Matcher) compute(st state) Bitset {
	v := m.v
	out := newBitset(len(v.pieces))
	if st.set == deadSet {
		return out
	}
	if st.remain == 0 && slices.Contains(m.sets[st.set], 0) {
		for id, e := range v.eog {
			if e {
				out.set(int32(id))
			}
		}
	}
	if st.remain == 0 {
		m.tokenElems(st.set, out)
	}
	states := make([]state, v.maxLen+1)
	states[0] = st
	valid := 0 // states[0..valid] hold the previous token's prefixes
	for i := 0; i < len(v.order); {
		p := v.sorted[v.off[i]:v.off[i+1]]
		d := min(int(v.lcp[i]), valid)
		for d < len(p) {
			var s state
			// ASCII from a whole character: the set's transition table.
			if c, at := p[d], states[d]; c < 0x80 && at.remain == 0 && m.ascii[at.set] != nil && m.ascii[at.set][c] >= 0 {
				s.set = m.ascii[at.set][c]
			} else {
				s = m.stepByte(at, c)
			}
			if s.set == deadSet {
				break
			}
			states[d+1] = s
			d++
		}
		valid = d
		if d < len(p) {
			// p[:d+1] is dead: so is every following token that starts with it.
			i++
			for i < len(v.order) && int(v.lcp[i]) > d {
				i++
			}
			continue
		}
		if end := states[d]; end.remain == 0 || m.partialOK(end) {
			out.set(v.order[i])
		}
		i++
	}
	return out
}

// tokenElems adds the tokens that token elements on top of set's stacks
// allow.
func (m *Matcher) tokenElems(set int32, out Bitset) {
	for _, s := range m.sets[set] {
		if s == 0 {
			continue
		}
		e := m.g.elems[m.nodes[s].pos]
		switch e.kind {
		case kToken:
			if int(e.val) < len(m.v.pieces) && !m.v.eog[e.val] {
				out.set(e.val)
			}
		case kNotToken:
			for _, id := range m.v.order {
				if id != e.val {
					out.set(id)
				}
			}
		}
	}
}
