package tokenizer

import "strings"

// Token texts llama.cpp recognises at load time (llama_vocab::impl::load)
// to fill in special ids the file does not give. Each candidate it picks is
// also forced to CONTROL.
var (
	eotTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
		"<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}
	eomTexts    = []string{"<|eom_id|>"}
	fimPreTexts = []string{"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
		"▁<PRE>", "<|code_prefix|>", "<|prefix|>"}
	fimSufTexts = []string{"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
		"▁<SUF>", "<|code_suffix|>", "<|suffix|>"}
	fimMidTexts = []string{"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
		"▁<MID>", "<|code_middle|>", "<|middle|>"}
	fimPadTexts = []string{"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}
	fimRepTexts = []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}
	fimSepTexts = []string{"<|file_sep|>"}
	// eogTexts end generation wherever they appear, and are forced to CONTROL.
	eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
		"<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
		"[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
		"<|tool_response>", "<｜end▁of▁sentence｜>", "[e~["}
	// gpt-oss's channel tokens are always rendered.
	userDefinedTexts = []string{"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}
)

// detectSpecials applies llama.cpp's text-based fix-ups of special ids and
// attributes. llama.cpp walks an unordered map, so when a vocabulary holds
// several candidates for one id it may pick any; k3 takes the first in the
// lists above, which is deterministic.
func (t *Tokenizer) detectSpecials() {
	s := &t.special
	pick := func(id *int32, texts []string) {
		if *id != NoToken {
			return
		}
		for _, w := range texts {
			if tid, ok := t.byText[w]; ok {
				*id = tid
				t.attrs[tid] |= AttrControl
				return
			}
		}
	}
	pick(&s.eot, eotTexts)
	pick(&s.eom, eomTexts)
	pick(&s.fimPre, fimPreTexts)
	pick(&s.fimSuf, fimSufTexts)
	pick(&s.fimMid, fimMidTexts)
	pick(&s.fimPad, fimPadTexts)
	pick(&s.fimRep, fimRepTexts)
	pick(&s.fimSep, fimSepTexts)

	for id, w := range t.tokens {
		if t.attrs[id]&AttrControl != 0 && strings.Contains(w, "unused") {
			t.attrs[id] |= AttrUnused
		}
	}

	t.eog = map[int32]bool{}
	for _, id := range []int32{s.fimPad, s.fimRep, s.fimSep} {
		if id != NoToken {
			t.eog[id] = true
		}
	}
	for _, w := range eogTexts {
		if id, ok := t.byText[w]; ok {
			t.eog[id] = true
			t.attrs[id] |= AttrControl
		}
	}
	for _, w := range userDefinedTexts {
		if id, ok := t.byText[w]; ok {
			t.attrs[id] = AttrUserDefined
		}
	}
	for _, id := range []int32{s.eos, s.eot, s.eom} {
		if id != NoToken {
			t.eog[id] = true
		}
	}
	t.harmonyFixups()
}

// harmonyFixups: with o200k_harmony's <|return|> and <|call|> (or
// solar-open's <|calls|> and <|flush|>), <|end|> stops being EOG and becomes
// user-defined; with gemma4's <|tool_response>, </s> stops being EOG and
// becomes normal.
func (t *Tokenizer) harmonyFixups() {
	has := map[string]int32{}
	for id := range t.eog {
		if id >= 0 && int(id) < len(t.tokens) {
			has[t.tokens[id]] = id
		}
	}
	_, ret := has["<|return|>"]
	_, call := has["<|call|>"]
	_, calls := has["<|calls|>"]
	_, flush := has["<|flush|>"]
	if end, ok := has["<|end|>"]; ok && ((ret && (call || calls)) || ((call || calls) && flush)) {
		delete(t.eog, end)
		t.attrs[end] = AttrUserDefined
	}
	if s, ok := has["</s>"]; ok {
		if _, tr := has["<|tool_response>"]; tr {
			delete(t.eog, s)
			t.attrs[s] = AttrNormal
		}
	}
}

// trie finds which special tokens occur in a text in one pass, so the
// partition below only scans for tokens that are present.
type trie struct {
	first [256]bool
	nodes []trieNode
}

type trieNode struct {
	edges []trieEdge
	id    int32 // token ending here, or NoToken
}

type trieEdge struct {
	b    byte
	next int32
}

func newTrie() *trie {
	return &trie{nodes: []trieNode{{id: NoToken}}}
}

func (tr *trie) insert(s string, id int32) {
	if s == "" {
		return
	}
	tr.first[s[0]] = true
	n := int32(0)
	for i := 0; i < len(s); i++ {
		next := int32(-1)
		for _, e := range tr.nodes[n].edges {
			if e.b == s[i] {
				next = e.next
				break
			}
		}
		if next < 0 {
			next = int32(len(tr.nodes))
			tr.nodes = append(tr.nodes, trieNode{id: NoToken})
			tr.nodes[n].edges = append(tr.nodes[n].edges, trieEdge{s[i], next})
		}
		n = next
	}
	tr.nodes[n].id = id
}

// present marks in seen every token that occurs somewhere in s.
func (tr *trie) present(s string, seen map[int32]bool) {
	for i := 0; i < len(s); i++ {
		if !tr.first[s[i]] {
			continue
		}
		n := int32(0)
		for j := i; j < len(s); j++ {
			next := int32(-1)
			for _, e := range tr.nodes[n].edges {
				if e.b == s[j] {
					next = e.next
					break
				}
			}
			if next < 0 {
				break
			}
			n = next
			if id := tr.nodes[n].id; id != NoToken {
				seen[id] = true
			}
		}
	}
}

// fragment is a piece of the input: raw text still to tokenize, or a
// special token already recognised.
type fragment struct {
	text  string
	token int32 // NoToken for text
}

// partition splits text at special tokens exactly as llama.cpp's
// tokenizer_st_partition: tokens are taken longest first, each one cutting
// every remaining text fragment at all its non-overlapping occurrences.
// CONTROL and UNKNOWN tokens are recognised only with parseSpecial;
// USER_DEFINED ones always are.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	frags := []fragment{{text: text, token: NoToken}}
	if len(t.specials) == 0 {
		return frags
	}
	seen := map[int32]bool{}
	t.trie.present(text, seen)
	if len(seen) == 0 {
		return frags
	}
	for _, id := range t.specials {
		if !seen[id] {
			continue
		}
		attr := t.attrs[id]
		if !parseSpecial && attr&(AttrControl|AttrUnknown) != 0 {
			continue
		}
		frags = t.cut(frags, id, attr)
	}
	return frags
}

func (t *Tokenizer) cut(frags []fragment, id int32, attr Attr) []fragment {
	word := t.tokens[id]
	out := make([]fragment, 0, len(frags)+2)
	for _, f := range frags {
		if f.token != NoToken {
			out = append(out, f)
			continue
		}
		rest := f.text
		for {
			i := strings.Index(rest, word)
			if i < 0 {
				break
			}
			left := rest[:i]
			if attr&AttrLStrip != 0 {
				left = strings.TrimRight(left, " \t\n\v\f\r")
			}
			if left != "" {
				out = append(out, fragment{text: left, token: NoToken})
			}
			out = append(out, fragment{token: id})
			rest = rest[i+len(word):]
			if attr&AttrRStrip != 0 {
				rest = strings.TrimLeft(rest, " \t\n\v\f\r")
			}
		}
		if rest != "" {
			out = append(out, fragment{text: rest, token: NoToken})
		}
	}
	return out
}
