package tokenizer

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Attr is a token's attribute set, with llama.cpp's bit values
// (llama_token_attr).
type Attr uint32

// Token attributes.
const (
	AttrUndefined   Attr = 0
	AttrUnknown     Attr = 1 << 0
	AttrUnused      Attr = 1 << 1
	AttrNormal      Attr = 1 << 2
	AttrControl     Attr = 1 << 3
	AttrUserDefined Attr = 1 << 4
	AttrByte        Attr = 1 << 5
	AttrNormalized  Attr = 1 << 6
	AttrLStrip      Attr = 1 << 7
	AttrRStrip      Attr = 1 << 8
	AttrSingleWord  Attr = 1 << 9
)

// TokenType is a value of tokenizer.ggml.token_type.
type TokenType int32

// Token types as GGUF stores them (llama_token_type).
const (
	TypeUndefined   TokenType = 0
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

func (t TokenType) attr() Attr {
	switch t {
	case TypeUnknown:
		return AttrUnknown
	case TypeUnused:
		return AttrUnused
	case TypeNormal:
		return AttrNormal
	case TypeControl:
		return AttrControl
	case TypeUserDefined:
		return AttrUserDefined
	case TypeByte:
		return AttrByte
	}
	return AttrUndefined
}

// NoToken marks an absent special token (LLAMA_TOKEN_NULL).
const NoToken int32 = -1

// IDKeys are the special-token id keys Config.IDs accepts, named as in GGUF
// without the "tokenizer.ggml." prefix.
var IDKeys = []string{
	"bos_token_id", "eos_token_id", "eot_token_id", "eom_token_id", "unknown_token_id",
	"seperator_token_id", "padding_token_id", "mask_token_id",
	"fim_pre_token_id", "fim_suf_token_id", "fim_mid_token_id", "fim_pad_token_id",
	"fim_rep_token_id", "fim_sep_token_id",
	"prefix_token_id", "suffix_token_id", "middle_token_id", // deprecated spellings of fim_pre/suf/mid
}

// FlagKeys are the boolean keys Config.Flags accepts.
var FlagKeys = []string{"add_bos_token", "add_eos_token", "add_space_prefix"}

// Config is the tokenizer part of a GGUF's metadata as plain Go values.
type Config struct {
	Model  string      // tokenizer.ggml.model; only "gpt2" is supported
	Pre    string      // tokenizer.ggml.pre
	Tokens []string    // tokenizer.ggml.tokens
	Types  []TokenType // tokenizer.ggml.token_type; nil means all normal
	Merges []string    // tokenizer.ggml.merges, "left right", rank = index; nil when absent
	// IDs holds the special-token ids present in the file (see IDKeys).
	IDs map[string]uint32
	// Flags holds the boolean keys present in the file (see FlagKeys).
	Flags map[string]bool
}

// Tokenizer is a byte-level BPE tokenizer that splits, merges and renders
// text exactly as llama.cpp does for the same GGUF metadata. It is safe for
// concurrent use.
type Tokenizer struct {
	pre    preInfo
	tokens []string
	attrs  []Attr
	byText map[string]int32

	// BPE works on symbol ids: a symbol is a byte-level string, with the id
	// of the token spelled the same, or an id >= len(tokens) for strings
	// merges produce but the vocabulary lacks (synth holds their spelling).
	merges  map[uint64]merge
	synth   []string
	byteSym [256]int32

	addBOS, addEOS, addSpacePrefix bool
	special                        specialIDs
	eog                            map[int32]bool

	specials []int32 // CONTROL, USER_DEFINED and UNKNOWN tokens, longest first
	trie     *trie
	pieces   []string // token_to_piece with special = true

	scratch sync.Pool
}

type merge struct {
	rank   int32
	result int32
}

type specialIDs struct {
	bos, eos, eot, eom, unk, sep, pad, mask        int32
	fimPre, fimSuf, fimMid, fimPad, fimRep, fimSep int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// New builds a tokenizer from plain values, applying the same defaults and
// fix-ups llama.cpp applies when it loads a vocabulary.
func New(c Config) (*Tokenizer, error) {
	if c.Model != "gpt2" {
		return nil, fmt.Errorf("tokenizer: tokenizer.ggml.model %q is not supported (k3 implements gpt2 byte-level BPE)", c.Model)
	}
	pre, err := lookupPre(c.Pre)
	if err != nil {
		return nil, err
	}
	if len(c.Tokens) == 0 {
		return nil, fmt.Errorf("tokenizer: tokenizer.ggml.tokens is empty")
	}
	if c.Types != nil && len(c.Types) < len(c.Tokens) {
		return nil, fmt.Errorf("tokenizer: tokenizer.ggml.token_type has %d entries for %d tokens", len(c.Types), len(c.Tokens))
	}
	// Like llama.cpp, only kimi-k2 may lack the merges key (nil here); an
	// empty list is allowed.
	if c.Merges == nil && c.Pre != "kimi-k2" {
		return nil, fmt.Errorf("tokenizer: tokenizer.ggml.merges is missing")
	}
	t := &Tokenizer{pre: pre, addBOS: pre.addBOS}
	flagsOnce.Do(buildFlags)
	if err := t.loadTokens(c); err != nil {
		return nil, err
	}
	t.loadMerges(c.Merges)
	t.loadSpecialIDs(c)
	t.detectSpecials()
	t.buildSpecialCache()
	t.buildPieces()
	return t, nil
}

func (t *Tokenizer) loadTokens(c Config) error {
	n := len(c.Tokens)
	t.tokens = make([]string, n)
	t.attrs = make([]Attr, n)
	t.byText = make(map[string]int32, n)
	for i, w := range c.Tokens {
		if w == "" {
			w = "[EMPTY_" + strconv.Itoa(i) + "]"
		}
		if j, dup := t.byText[w]; dup {
			// llama.cpp asserts on this and refuses the file.
			return fmt.Errorf("tokenizer: tokens %d and %d are both %q", j, i, w)
		}
		t.tokens[i] = w
		t.byText[w] = int32(i)
		t.attrs[i] = AttrNormal
		if c.Types != nil {
			t.attrs[i] = c.Types[i].attr()
		}
	}
	return nil
}

// symbol returns the BPE symbol id of a byte-level spelling, creating a
// synthetic id for strings the vocabulary lacks. A token whose text is not
// byte-level can never meet a byte-level symbol, so its id is harmless here.
func (t *Tokenizer) symbol(enc []byte, synth map[string]int32) (int32, bool) {
	if id, ok := t.byText[string(enc)]; ok {
		return id, true
	}
	if id, ok := synth[string(enc)]; ok {
		return id, true
	}
	if !isByteLevel(string(enc)) {
		return 0, false
	}
	id := int32(len(t.tokens) + len(t.synth))
	t.synth = append(t.synth, string(enc))
	synth[string(enc)] = id
	return id, true
}

// loadMerges turns "left right" strings into a rank table keyed by the pair
// of symbol ids. Merges whose halves are not byte-level strings can never
// apply and are skipped; for a pair listed twice the first rank wins, as
// with llama.cpp's map emplace.
func (t *Tokenizer) loadMerges(merges []string) {
	synth := map[string]int32{}
	for b := 0; b < 256; b++ {
		t.byteSym[b], _ = t.symbol([]byte(byteToText[b]), synth)
	}
	t.merges = make(map[uint64]merge, len(merges))
	var both []byte
	for rank, m := range merges {
		left, right := "", ""
		if len(m) > 1 {
			if sp := strings.IndexByte(m[1:], ' '); sp >= 0 {
				left, right = m[:sp+1], m[sp+2:]
			}
		}
		if left == "" || right == "" {
			continue
		}
		l, okL := t.symbol([]byte(left), synth)
		r, okR := t.symbol([]byte(right), synth)
		if !okL || !okR {
			continue
		}
		key := pairKey(l, r)
		if _, dup := t.merges[key]; dup {
			continue
		}
		both = append(append(both[:0], left...), right...)
		res, _ := t.symbol(both, synth)
		t.merges[key] = merge{rank: int32(rank), result: res}
	}
}

func (t *Tokenizer) loadSpecialIDs(c Config) {
	s := &t.special
	*s = specialIDs{bos: 11, eos: 11, eot: NoToken, eom: NoToken, unk: NoToken, sep: NoToken, pad: NoToken,
		mask: NoToken, fimPre: NoToken, fimSuf: NoToken, fimMid: NoToken, fimPad: NoToken, fimRep: NoToken, fimSep: NoToken}
	if t.pre.noBOS {
		s.bos = NoToken
	}
	fields := map[string]*int32{
		"bos_token_id": &s.bos, "eos_token_id": &s.eos, "eot_token_id": &s.eot, "eom_token_id": &s.eom,
		"unknown_token_id": &s.unk, "seperator_token_id": &s.sep, "padding_token_id": &s.pad,
		"mask_token_id": &s.mask, "fim_pre_token_id": &s.fimPre, "fim_suf_token_id": &s.fimSuf,
		"fim_mid_token_id": &s.fimMid, "fim_pad_token_id": &s.fimPad, "fim_rep_token_id": &s.fimRep,
		"fim_sep_token_id": &s.fimSep, "prefix_token_id": &s.fimPre, "suffix_token_id": &s.fimSuf,
		"middle_token_id": &s.fimMid,
	}
	n := int32(len(t.tokens))
	for _, key := range IDKeys {
		id := fields[key]
		if *id >= n {
			*id = NoToken
		}
		if v, ok := c.IDs[key]; ok && int64(v) < int64(n) {
			*id = int32(v)
		}
	}
	if v, ok := c.Flags["add_bos_token"]; ok {
		t.addBOS = v
	}
	if v, ok := c.Flags["add_eos_token"]; ok {
		t.addEOS = v
	}
	if v, ok := c.Flags["add_space_prefix"]; ok {
		t.addSpacePrefix = v
	}
}

// buildSpecialCache lists the tokens the special-token partition looks
// for, longest first; ties keep id order (llama.cpp's std::sort leaves their
// order unspecified, which matters only for overlapping equal-length tokens).
func (t *Tokenizer) buildSpecialCache() {
	t.specials = t.specials[:0]
	for id, a := range t.attrs {
		if a&(AttrControl|AttrUserDefined|AttrUnknown) != 0 {
			t.specials = append(t.specials, int32(id))
		}
	}
	sort.SliceStable(t.specials, func(i, j int) bool {
		return len(t.tokens[t.specials[i]]) > len(t.tokens[t.specials[j]])
	})
	t.trie = newTrie()
	for _, id := range t.specials {
		t.trie.insert(t.tokens[id], id)
	}
}

// NVocab is the number of tokens.
func (t *Tokenizer) NVocab() int { return len(t.tokens) }

// Token returns the text of token id as stored in the vocabulary.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// Attr returns the attributes of token id after llama.cpp's load-time
// fix-ups.
func (t *Tokenizer) Attr(id int32) Attr {
	if id < 0 || int(id) >= len(t.attrs) {
		return AttrUndefined
	}
	return t.attrs[id]
}

// Lookup returns the id of the token whose text is s.
func (t *Tokenizer) Lookup(s string) (int32, bool) {
	id, ok := t.byText[s]
	return id, ok
}

// BOS returns the beginning-of-sequence id, or NoToken.
func (t *Tokenizer) BOS() int32 { return t.special.bos }

// FIM returns the fill-in-the-middle prefix, suffix and middle tokens,
// NoToken for each the vocabulary lacks.
func (t *Tokenizer) FIM() (pre, suf, mid int32) {
	return t.special.fimPre, t.special.fimSuf, t.special.fimMid
}

// FIMRepo returns the repository and file separator tokens of
// repository-level fill-in-the-middle prompts, NoToken where missing.
func (t *Tokenizer) FIMRepo() (rep, sep int32) { return t.special.fimRep, t.special.fimSep }

// EOS returns the end-of-sequence id, or NoToken.
func (t *Tokenizer) EOS() int32 { return t.special.eos }

// EOT returns the end-of-turn id, or NoToken.
func (t *Tokenizer) EOT() int32 { return t.special.eot }

// PAD returns the padding id, or NoToken.
func (t *Tokenizer) PAD() int32 { return t.special.pad }

// AddBOS reports whether Tokenize with addSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether Tokenize with addSpecial appends EOS.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// IsEOG reports whether id ends generation (llama_vocab_is_eog).
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// EOG returns the end-of-generation ids in increasing order.
func (t *Tokenizer) EOG() []int32 {
	ids := make([]int32, 0, len(t.eog))
	for id := range t.eog {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
