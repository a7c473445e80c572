package tokenizer

import "fmt"

// state is per-call scratch space, pooled so that concurrent calls do not
// share it. Its word cache remembers the BPE result of recent words.
type state struct {
	cpts  []rune
	lens  []int
	word  []byte
	enc   []byte
	coll  []byte
	syms  []bpeSym
	heap  bigramHeap
	cache map[string][]int32
}

const (
	maxCachedWord = 64
	maxCacheWords = 1 << 16
)

func (t *Tokenizer) getState() *state {
	if s, ok := t.scratch.Get().(*state); ok {
		return s
	}
	return &state{cache: make(map[string][]int32)}
}

// putState returns scratch space to the pool, dropping buffers a huge
// input grew so that the pool does not pin them.
func (t *Tokenizer) putState(s *state) {
	const keep = 1 << 20
	if cap(s.cpts) > keep || cap(s.lens) > keep || cap(s.coll) > keep || cap(s.syms) > keep {
		s.cpts, s.lens, s.coll, s.syms, s.heap = nil, nil, nil, nil, nil
	}
	t.scratch.Put(s)
}

// Tokenize splits text into token ids as llama_tokenize does. addSpecial
// adds BOS/EOS as the vocabulary asks; parseSpecial recognises CONTROL
// tokens written in the text (USER_DEFINED ones are always recognised).
// It fails only when addSpecial asks for a BOS or EOS the vocabulary lacks.
func (t *Tokenizer) Tokenize(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	out := make([]int32, 0, len(text)/3+2)
	if addSpecial && t.addBOS {
		if t.special.bos == NoToken {
			return nil, fmt.Errorf("tokenizer: add_bos_token is set but the vocabulary has no BOS token")
		}
		out = append(out, t.special.bos)
	}
	if text != "" {
		s := t.getState()
		for _, f := range t.partition(text, parseSpecial) {
			if f.token != NoToken {
				out = append(out, f.token)
				continue
			}
			out = t.encodeText(s, f.text, out)
		}
		t.putState(s)
	}
	if addSpecial && t.addEOS {
		if t.special.eos == NoToken {
			return nil, fmt.Errorf("tokenizer: add_eos_token is set but the vocabulary has no EOS token")
		}
		out = append(out, t.special.eos)
	}
	return out, nil
}

// encodeText pre-tokenizes one raw fragment and runs BPE on each word. Words
// are rebuilt from the decoded codepoints, so invalid UTF-8 reaches BPE as
// U+FFFD, as in llama.cpp.
func (t *Tokenizer) encodeText(s *state, text string, out []int32) []int32 {
	s.cpts = decodeCpts(s.cpts[:0], text)
	s.lens = t.pre.kind.split(s.cpts, s.lens[:0], &s.coll)
	pos := 0
	for _, n := range s.lens {
		w := s.word[:0]
		for _, r := range s.cpts[pos : pos+n] {
			w = appendCpt(w, r)
		}
		s.word = w
		pos += n
		out = t.encodeWord(s, w, out)
	}
	return out
}

func (t *Tokenizer) encodeWord(s *state, w []byte, out []int32) []int32 {
	if ids, ok := s.cache[string(w)]; ok {
		return append(out, ids...)
	}
	start := len(out)
	if t.pre.ignoreMerges {
		s.enc = appendByteEncoded(s.enc[:0], string(w))
		if id, ok := t.byText[string(s.enc)]; ok {
			out = append(out, id)
			return t.remember(s, w, out[start:], out)
		}
	}
	out = t.bpe(s, w, out)
	return t.remember(s, w, out[start:], out)
}

func (t *Tokenizer) remember(s *state, w []byte, ids, out []int32) []int32 {
	if len(w) <= maxCachedWord {
		if len(s.cache) >= maxCacheWords {
			clear(s.cache)
		}
		s.cache[string(w)] = append([]int32(nil), ids...)
	}
	return out
}

type bpeSym struct {
	id         int32
	prev, next int32
	alive      bool
}

type bigram struct {
	rank, left, right int32
	lid, rid          int32
	result            int32
}

// bigramHeap is a binary min-heap on (rank, left), the order in which
// llama.cpp's priority queue hands out merges.
type bigramHeap []bigram

func (h bigramHeap) less(i, j int) bool {
	return h[i].rank < h[j].rank || (h[i].rank == h[j].rank && h[i].left < h[j].left)
}

func (h *bigramHeap) push(b bigram) {
	*h = append(*h, b)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if !a.less(i, p) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *bigramHeap) pop() bigram {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && a.less(l, m) {
			m = l
		}
		if r < n && a.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}

func (t *Tokenizer) addBigram(s *state, l, r int32) {
	if l < 0 || r < 0 {
		return
	}
	lid, rid := s.syms[l].id, s.syms[r].id
	if m, ok := t.merges[pairKey(lid, rid)]; ok {
		s.heap.push(bigram{rank: m.rank, left: l, right: r, lid: lid, rid: rid, result: m.result})
	}
}

// bpe merges the bytes of one word, always taking the lowest-ranked adjacent
// pair and, among equal ranks, the leftmost.
func (t *Tokenizer) bpe(s *state, w []byte, out []int32) []int32 {
	n := int32(len(w))
	s.syms = s.syms[:0]
	for i, b := range w {
		next := int32(i) + 1
		if next == n {
			next = -1
		}
		s.syms = append(s.syms, bpeSym{id: t.byteSym[b], prev: int32(i) - 1, next: next, alive: true})
	}
	s.heap = s.heap[:0]
	for i := int32(1); i < n; i++ {
		t.addBigram(s, i-1, i)
	}
	for len(s.heap) > 0 {
		b := s.heap.pop()
		left, right := &s.syms[b.left], &s.syms[b.right]
		if !left.alive || !right.alive || left.id != b.lid || right.id != b.rid {
			continue
		}
		left.id = b.result
		right.alive = false
		left.next = right.next
		if right.next >= 0 {
			s.syms[right.next].prev = b.left
		}
		t.addBigram(s, left.prev, b.left)
		t.addBigram(s, b.left, left.next)
	}
	for i := int32(0); i >= 0 && i < n; i = s.syms[i].next {
		out = t.emitSymbol(s.syms[i].id, out)
	}
	return out
}

// emitSymbol writes a finished symbol. A symbol the vocabulary lacks falls
// back to the tokens of the single bytes of its byte-level spelling, and
// bytes with no such token are dropped, as in llama.cpp.
func (t *Tokenizer) emitSymbol(id int32, out []int32) []int32 {
	if int(id) < len(t.tokens) {
		return append(out, id)
	}
	enc := t.synth[int(id)-len(t.tokens)]
	for i := 0; i < len(enc); i++ {
		if tid, ok := t.byText[enc[i:i+1]]; ok {
			out = append(out, tid)
		}
	}
	return out
}
