package chat

import (
	"encoding/json"
	"strings"
)

// Kimi K3 writes its replies in a tagged format built from three special
// tokens: open_tag(t, attrs) = <|open|>t k="v"...<|sep|>, close_tag(t) =
// <|close|>t<|sep|>, and <|end_of_msg|> ends a message. A reply is
//
//	[<|open|>think<|sep|>REASONING<|close|>think<|sep|>]
//	<|open|>response<|sep|>CONTENT<|close|>response<|sep|>
//	[<|open|>tools<|sep|>
//	   <|open|>call tool="NAME" index="1"<|sep|>
//	     <|open|>argument key="KEY" type="string"<|sep|>VALUE<|close|>argument<|sep|> ...
//	     (or <|open|>json type="object"<|sep|>{...}<|close|>json<|sep|>)
//	   <|close|>call<|sep|> ...
//	 <|close|>tools<|sep|>]
//	<|close|>message<|sep|><|end_of_msg|>
//
// The generation prompt already opened the think (or response) section, so a
// reply starts inside it. Attribute values are escaped with &amp; and &quot;.
const (
	markOpen  = "<|open|>"
	markClose = "<|close|>"
	markSep   = "<|sep|>"
	markEnd   = "<|end_of_msg|>"
	// maxTagLen bounds how long the parser waits for the <|sep|> that ends a
	// tag before it takes the opener for plain text.
	maxTagLen = 1024
)

// ParseOptions describe the prompt a reply continues.
type ParseOptions struct {
	// Format is the template's reply format (Template.ParseOptions sets it).
	Format Format
	// Thinking: the generation prompt opened the think section (the template's
	// thinking switch was on), so the reply starts as reasoning.
	Thinking bool
	// Prefix is the end of the generation prompt after the format's
	// assistant marker (Qwen3's empty think block, DeepSeek's <think>):
	// llama.cpp's parsers read the reply with it in front. Empty with
	// Thinking set stands for the format's think opener.
	Prefix string
	// ReasoningNone is llama-server's reasoning_format "none": reasoning
	// tags are left in the content (the llama.cpp formats).
	ReasoningNone bool
	// NewID makes the id of a call whose format writes none (nil: random
	// "call_" ids, as llama-server makes).
	NewID func() string
	// Tools are the declared tools. A parameter whose schema type is "string"
	// becomes a JSON string; others are taken as JSON text. Without a schema the
	// type="..." attribute the model wrote decides.
	Tools []Tool
}

// Parsed is a whole reply in OpenAI's fields.
type Parsed struct {
	Reasoning string
	Content   string
	ToolCalls []ToolCall
}

// Delta is one streaming update: exactly one of its fields is set.
type Delta struct {
	Reasoning string
	Content   string
	ToolCall  *ToolCallDelta
}

// ToolCallDelta is a piece of the tool call at Index: the first delta of a
// call carries its ID and Name, later ones fragments of the arguments JSON.
type ToolCallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Parse parses a whole reply; it equals feeding the text to a Parser in any
// chunks and closing it (for the llama.cpp formats: in chunks at which the
// reply so far parses, see pegParser).
func Parse(text string, o ParseOptions) Parsed {
	p := NewParser(o)
	p.Feed(text)
	p.Close()
	return p.Result()
}

// Parser parses a reply as it is generated, in the format of its
// ParseOptions. Deltas only ever add to what was sent.
type Parser struct {
	impl replyParser
}

// NewParser returns a parser for one reply.
func NewParser(o ParseOptions) *Parser {
	return &Parser{impl: o.Format.impl().newParser(o)}
}

// Feed parses the next chunk of generated text and returns the deltas it
// completes.
func (p *Parser) Feed(chunk string) []Delta { return p.impl.feed(chunk) }

// Close ends the reply: held-back text is released and an unterminated
// call is closed, as the format allows.
func (p *Parser) Close() []Delta { return p.impl.close() }

// Result is the reply parsed so far.
func (p *Parser) Result() Parsed { return p.impl.result() }

type parseState int

const (
	stReasoning parseState = iota
	stContent
	stBetween // between sections: whitespace is dropped, other text is content
	stTools
	stCall
	stArg
	stJSON
	stDone
)

// kimiK3Format is Kimi K3's tagged format.
type kimiK3Format struct{}

func (kimiK3Format) assistant() string { return "" }

func (kimiK3Format) newParser(o ParseOptions) replyParser { return newK3Parser(o) }

func (kimiK3Format) forcedCall(o ParseOptions, name string) string { return k3ForcedCall(o, name) }

func (kimiK3Format) grammar(o ParseOptions, c Constraint) (string, string, error) {
	return k3ReplyGrammar(o, c)
}

// k3Parser parses a Kimi K3 reply as it is generated. Text that could still
// turn out to be part of a marker is held back until it cannot.
type k3Parser struct {
	opts    ParseOptions
	types   map[string]map[string]string // tool -> parameter -> schema type
	buf     string
	state   parseState
	ws      string // whitespace held in stBetween
	call    int    // index of the open call, -1 if none
	nargs   int    // arguments written in the open call
	rawArg  bool   // the open argument is JSON text, not a string
	raw     strings.Builder
	jsonArg bool // the open call's arguments come from a json block
	out     []Delta
	res     Parsed
}

func newK3Parser(o ParseOptions) *k3Parser {
	p := &k3Parser{opts: o, call: -1, types: map[string]map[string]string{}}
	if !o.Thinking {
		p.state = stContent
	}
	for _, tl := range o.Tools {
		var schema struct {
			Properties map[string]struct {
				Type any `json:"type"`
			} `json:"properties"`
		}
		if json.Unmarshal(tl.Parameters, &schema) != nil {
			continue
		}
		m := map[string]string{}
		for k, v := range schema.Properties {
			if s, ok := v.Type.(string); ok {
				m[k] = s
			} else {
				m[k] = "" // absent or a list of types: JSON text
			}
		}
		p.types[tl.Name] = m
	}
	return p
}

func (p *k3Parser) feed(chunk string) []Delta {
	p.buf += chunk
	p.process(false)
	return p.flush()
}

func (p *k3Parser) close() []Delta {
	p.process(false)
	if truncatedMarker(p.buf) {
		// generation stopped inside a marker: like llama.cpp, drop the stub
		p.buf = ""
	}
	p.process(true)
	p.endCall()
	p.ws = ""
	p.state = stDone
	return p.flush()
}

func (p *k3Parser) result() Parsed {
	r := p.res
	r.ToolCalls = append([]ToolCall(nil), p.res.ToolCalls...)
	return r
}

func (p *k3Parser) flush() []Delta {
	out := p.out
	p.out = nil
	return out
}

func (p *k3Parser) process(final bool) {
	for p.buf != "" {
		i := strings.Index(p.buf, "<|")
		if i < 0 {
			n := len(p.buf)
			if !final && strings.HasSuffix(p.buf, "<") {
				n--
			}
			p.text(p.buf[:n])
			p.buf = p.buf[n:]
			return
		}
		if i > 0 {
			p.text(p.buf[:i])
			p.buf = p.buf[i:]
			continue
		}
		n, body, kind, ok := matchMarker(p.buf, final)
		if n == 0 {
			return // need more text to decide
		}
		if !ok {
			p.text(p.buf[:n])
		} else {
			p.marker(kind, body, p.buf[:n])
		}
		p.buf = p.buf[n:]
	}
}

// truncatedMarker reports whether s, text still held at the end of the reply,
// is the beginning of one of the format's tags cut short.
func truncatedMarker(s string) bool {
	if s == "" || s[0] != '<' {
		return false
	}
	for _, name := range []string{"message", "think", "response", "tools", "call", "argument", "json"} {
		for _, m := range []string{markOpen + name, markClose + name + markSep} {
			if strings.HasPrefix(m, s) {
				return true
			}
			// an opener with attributes whose <|sep|> never came
			if strings.HasPrefix(m, markOpen) && strings.HasPrefix(s, m+" ") && !strings.Contains(s[len(m):], "<|") {
				return true
			}
		}
		if strings.HasPrefix(markOpen+name+markSep, s) {
			return true
		}
	}
	return strings.HasPrefix(markEnd, s)
}

// matchMarker looks at s, which starts with "<|". It returns n == 0 when more
// text is needed; otherwise n bytes are consumed, as a marker (ok) or as plain
// text.
func matchMarker(s string, final bool) (n int, body, kind string, ok bool) {
	for _, m := range []string{markOpen, markClose, markEnd} {
		switch {
		case strings.HasPrefix(s, m):
			if m == markEnd {
				return len(m), "", m, true
			}
			return matchTag(s, m, final)
		case strings.HasPrefix(m, s) && !final:
			return 0, "", "", false
		}
	}
	return 2, "", "", false
}

func matchTag(s, opener string, final bool) (n int, body, kind string, ok bool) {
	rest := s[len(opener):]
	j := strings.Index(rest, "<|")
	if j < 0 {
		// a "<|" could still start at len(rest)-1
		if !final && len(rest) <= maxTagLen {
			return 0, "", "", false
		}
		return len(opener), "", "", false
	}
	if j >= maxTagLen {
		return len(opener), "", "", false
	}
	after := rest[j:]
	switch {
	case strings.HasPrefix(after, markSep):
		return len(opener) + j + len(markSep), rest[:j], opener, true
	case strings.HasPrefix(markSep, after) && !final:
		return 0, "", "", false
	}
	return len(opener), "", "", false
}

// ForcedCall is the text that, written after the generation prompt as if
// the model had, makes the reply a call of the tool name, in the format of
// o: it closes the section the prompt opened (an open think section stays
// empty), leaves the content empty and opens the call. With name "" it
// stops where the call's name goes, so the model writes the name (k3 serve holds it
// to the declared tools with a sampling mask). This is how k3 honours
// tool_choice "required" or a named function without grammar sampling:
// the choice is forced, the arguments are the model's.
func ForcedCall(o ParseOptions, name string) string {
	return o.Format.impl().forcedCall(o, name)
}

func k3ForcedCall(o ParseOptions, name string) string {
	var b strings.Builder
	if o.Thinking {
		b.WriteString(markClose + "think" + markSep + markOpen + "response" + markSep)
	}
	b.WriteString(markClose + "response" + markSep + markOpen + "tools" + markSep + markOpen + `call tool="`)
	if name != "" {
		b.WriteString(CallNamed(name))
	}
	return b.String()
}

// CallNamed is the rest of ForcedCall(o, "") that names the tool and
// closes the call's tag: what a model that chose name writes next.
func CallNamed(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "&", "&amp;"), `"`, "&quot;") + `" index="1"` + markSep
}
