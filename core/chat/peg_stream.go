package chat

import (
	"crypto/rand"
	"unicode/utf8"
)

// pegParser streams a reply the way llama-server does with llama.cpp's
// parsers: the whole text so far is parsed again after every chunk, and what
// grew since the last parse is sent. A parse that fails, that finds nothing,
// or that would take back something already sent (fewer calls, a shorter
// content) is skipped: the reply stays as it was until the text parses
// again.
//
// Where llama-server answers an error (the finished reply does not match
// the format), the reply is that of the longest prefix that parses: what a
// stream had shown, with the text after the break dropped. A parser without
// an end (Qwen3-Coder's) parses such a reply by stopping at the break,
// which can take back what a prefix showed (a call that turns out
// malformed); k3 counts a parse that stops before the end of the text as
// failed, so there too the reply is what the stream had shown.
type pegParser struct {
	root   peg
	prefix string
	text   string
	good   int // len(text) at the last accepted parse
	res    Parsed
	out    []Delta
	newID  func() string
	done   bool
}

func newPEGParser(o ParseOptions, root peg, thinkOpenTag string) *pegParser {
	p := &pegParser{root: root, prefix: o.Prefix, newID: o.NewID}
	if p.prefix == "" && o.Thinking {
		p.prefix = thinkOpenTag
	}
	if p.newID == nil {
		p.newID = randomCallID
	}
	return p
}

func (p *pegParser) feed(chunk string) []Delta {
	if p.done || chunk == "" {
		return nil
	}
	p.text += chunk
	p.update(p.text)
	return p.flush()
}

func (p *pegParser) close() []Delta {
	if p.done {
		return nil
	}
	p.done = true
	if p.update(p.text) {
		return p.flush()
	}
	// The longest prefix that parses, down to what was accepted: tried
	// from the end for maxCloseTries prefixes, then from where the parse
	// failed (a prefix that ends past a break rarely parses). Every byte
	// is a cut: a prefix that ends inside a character parses as one cut
	// before it, and one that ends at a stray byte must be tried, or the
	// result falls short of what a stream showed.
	tries := 0
	// No prefix holding an invalid byte parses (no parser takes one), so
	// the search starts before the first.
	for n := min(len(p.text)-1, validEnd(p.text)); n > p.good; n-- {
		if tries++; tries > maxCloseTries {
			r := p.root(p.prefix+p.text, 0)
			for n = min(n, r.end-len(p.prefix)); n > p.good; n-- {
				if p.update(p.text[:n]) {
					break
				}
			}
			break
		}
		if p.update(p.text[:n]) {
			break
		}
	}
	return p.flush()
}

// validEnd is the largest n at which s[:n] holds no invalid UTF-8: up to
// the first byte that is not part of a valid character, and past it the
// bytes that a character could still start with (in s[:n] they are cut by
// the end, so incomplete, not invalid).
func validEnd(s string) int {
	for at := 0; at < len(s); {
		if s[at] < utf8.RuneSelf {
			at++
			continue
		}
		_, w, st := decodeRune(s, at)
		if st == runeOK {
			at += w
			continue
		}
		k := min(utf8.UTFMax-1, len(s)-at)
		for k > 0 && utf8.FullRuneInString(s[at:at+k]) {
			k--
		}
		return at + k
	}
	return len(s)
}

// maxCloseTries bounds the prefixes close tries one by one.
const maxCloseTries = 1024

func (p *pegParser) result() Parsed {
	r := p.res
	r.ToolCalls = append([]ToolCall(nil), p.res.ToolCalls...)
	return r
}

func (p *pegParser) flush() []Delta {
	out := p.out
	p.out = nil
	return out
}

// parse is the reply in text by llama.cpp's rules, ok false where it fails.
func (p *pegParser) parse(text string) (Parsed, bool) {
	r := p.root(p.prefix+text, 0)
	if r.status == pegFail {
		return Parsed{}, false
	}
	return mapReply(r.nodes), true
}

// update parses text and sends what it adds; false when the parse fails
// or stops before the end of the text.
func (p *pegParser) update(text string) bool {
	r := p.root(p.prefix+text, 0)
	if r.status == pegFail || r.status == pegOK && r.end < len(p.prefix)+len(text) {
		return false
	}
	m := mapReply(r.nodes)
	if m.Reasoning == "" && m.Content == "" && len(m.ToolCalls) == 0 {
		return true // llama-server skips an empty message
	}
	for i := range m.ToolCalls {
		switch {
		case i < len(p.res.ToolCalls):
			m.ToolCalls[i].ID = p.res.ToolCalls[i].ID
		case m.ToolCalls[i].ID == "":
			m.ToolCalls[i].ID = p.newID()
		}
	}
	if !p.extends(m) {
		return true
	}
	p.good = len(text)
	if d := m.Reasoning[len(p.res.Reasoning):]; d != "" {
		p.out = append(p.out, Delta{Reasoning: d})
	}
	if d := m.Content[len(p.res.Content):]; d != "" {
		p.out = append(p.out, Delta{Content: d})
	}
	for i, c := range m.ToolCalls {
		var sent string
		if i < len(p.res.ToolCalls) {
			sent = p.res.ToolCalls[i].Function.Arguments
		} else {
			p.out = append(p.out, Delta{ToolCall: &ToolCallDelta{Index: i, ID: c.ID, Name: c.Function.Name}})
		}
		if d := c.Function.Arguments[len(sent):]; d != "" {
			p.out = append(p.out, Delta{ToolCall: &ToolCallDelta{Index: i, Arguments: d}})
		}
	}
	p.res = m
	return true
}

// extends: m only adds to what was sent.
func (p *pegParser) extends(m Parsed) bool {
	if !hasPrefix(m.Reasoning, p.res.Reasoning) || !hasPrefix(m.Content, p.res.Content) ||
		len(m.ToolCalls) < len(p.res.ToolCalls) {
		return false
	}
	for i, old := range p.res.ToolCalls {
		c := m.ToolCalls[i]
		if c.Function.Name != old.Function.Name || !hasPrefix(c.Function.Arguments, old.Function.Arguments) {
			return false
		}
	}
	return true
}

func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// randomCallID is a call id as llama-server makes them: random letters and
// digits.
func randomCallID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "call_" + string(b)
}
