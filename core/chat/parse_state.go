package chat

import (
	"encoding/json"
	"strconv"
	"strings"
)

// text handles plain text in the current state.
func (p *k3Parser) text(s string) {
	if s == "" {
		return
	}
	switch p.state {
	case stReasoning:
		if p.opts.ReasoningNone {
			// llama.cpp's Kimi K3 parser with reasoning_format none:
			// the think section's text is content, its tags dropped.
			p.emitText(Delta{Content: s})
			break
		}
		p.emitText(Delta{Reasoning: s})
	case stContent:
		p.emitText(Delta{Content: s})
	case stBetween:
		// Whitespace between sections is layout; anything else is content.
		// Trailing whitespace is held so the decision does not depend on where
		// a chunk ends.
		s = p.ws + s
		trimmed := strings.TrimRight(s, " \t\r\n")
		p.ws = s[len(trimmed):]
		if trimmed != "" {
			p.emitText(Delta{Content: trimmed})
		}
	case stArg:
		if p.rawArg {
			p.raw.WriteString(s)
		} else {
			p.emitArgs(escapeJSONInner(s))
		}
	case stJSON:
		p.emitArgs(s)
	}
	// stTools, stCall, stDone: text outside any value is not part of the reply.
}

// marker handles a complete marker; lit is its text, written out when the
// marker means nothing where it stands and is not one of the format's tags.
func (p *k3Parser) marker(kind, body, lit string) {
	if kind == markEnd {
		p.finish()
		return
	}
	name, attrs := parseTag(body)
	open := kind == markOpen
	switch {
	case name == "message":
		if !open {
			p.finish()
		}
		// an opener repeats the generation prompt: nothing to do
	case name == "think" && open && p.inProse():
		p.enter(stReasoning)
	case name == "think" && !open && p.state == stReasoning:
		p.enter(stBetween)
	case name == "response" && open && p.inProse():
		p.enter(stContent)
	case name == "response" && !open && p.state == stContent:
		p.enter(stBetween)
	case name == "tools" && open && p.inProse():
		p.enter(stTools)
	case name == "tools" && !open && (p.state == stTools || p.state == stCall):
		p.endCall()
		p.enter(stBetween)
	case name == "call" && open && (p.state == stTools || p.inProse()):
		p.startCall(attrs["tool"])
	case name == "call" && !open && p.call >= 0:
		p.endCall()
		p.state = stTools
	case name == "argument" && open && p.state == stCall && !p.jsonArg:
		p.startArg(attrs["key"], attrs["type"])
	case name == "argument" && !open && p.state == stArg:
		p.endArg()
		p.state = stCall
	case name == "json" && open && p.state == stCall && p.nargs == 0 && !p.jsonArg:
		p.jsonArg = true
		p.state = stJSON
	case name == "json" && !open && p.state == stJSON:
		p.state = stCall
	case knownTag(name):
		// a known tag where it makes no sense: dropped, never shown as text
	default:
		p.text(lit)
	}
}

func knownTag(name string) bool {
	switch name {
	case "message", "think", "response", "tools", "call", "argument", "json":
		return true
	}
	return false
}

func (p *k3Parser) inProse() bool {
	return p.state == stReasoning || p.state == stContent || p.state == stBetween
}

func (p *k3Parser) enter(s parseState) {
	p.ws = ""
	p.state = s
}

func (p *k3Parser) finish() {
	p.endCall()
	p.enter(stDone)
}

func (p *k3Parser) startCall(name string) {
	p.endCall()
	p.ws = ""
	p.call = len(p.res.ToolCalls)
	p.nargs = 0
	p.jsonArg = false
	id := "functions." + name + ":" + strconv.Itoa(p.call)
	p.res.ToolCalls = append(p.res.ToolCalls, ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: name}})
	p.out = append(p.out, Delta{ToolCall: &ToolCallDelta{Index: p.call, ID: id, Name: name}})
	p.state = stCall
}

// endCall closes the open call's arguments: an unterminated argument is
// ended, and arguments built from argument tags get their closing brace.
func (p *k3Parser) endCall() {
	if p.call < 0 {
		return
	}
	if p.state == stArg {
		p.endArg()
	}
	switch {
	case p.jsonArg:
		if p.res.ToolCalls[p.call].Function.Arguments == "" {
			p.emitArgs("{}")
		}
	case p.nargs == 0:
		p.emitArgs("{}")
	default:
		p.emitArgs("}")
	}
	p.call = -1
	p.state = stTools
}

func (p *k3Parser) startArg(key, attrType string) {
	prefix := ","
	if p.nargs == 0 {
		prefix = "{"
	}
	p.nargs++
	kb, _ := json.Marshal(key)
	p.emitArgs(prefix + string(kb) + ":")
	typ, known := attrType, false
	if params, ok := p.types[p.res.ToolCalls[p.call].Function.Name]; ok {
		if t, ok := params[key]; ok {
			typ, known = t, true
		}
	}
	if !known && typ == "" {
		typ = "string"
	}
	p.rawArg = typ != "string"
	p.raw.Reset()
	if !p.rawArg {
		p.emitArgs(`"`)
	}
	p.state = stArg
}

// endArg writes the value of a JSON-text argument, which has to be whole to
// be checked: text that is not JSON is passed on as a string.
func (p *k3Parser) endArg() {
	if !p.rawArg {
		p.emitArgs(`"`)
		return
	}
	v := strings.TrimSpace(p.raw.String())
	if v == "" || !json.Valid([]byte(v)) {
		v = `"` + escapeJSONInner(p.raw.String()) + `"`
	}
	p.emitArgs(v)
	p.raw.Reset()
}

func (p *k3Parser) emitText(d Delta) {
	p.res.Reasoning += d.Reasoning
	p.res.Content += d.Content
	if n := len(p.out); n > 0 {
		last := &p.out[n-1]
		if last.ToolCall == nil && (last.Reasoning != "") == (d.Reasoning != "") {
			last.Reasoning += d.Reasoning
			last.Content += d.Content
			return
		}
	}
	p.out = append(p.out, d)
}

func (p *k3Parser) emitArgs(s string) {
	if p.call < 0 || s == "" {
		return
	}
	p.res.ToolCalls[p.call].Function.Arguments += s
	if n := len(p.out); n > 0 {
		if last := p.out[n-1].ToolCall; last != nil && last.Index == p.call && last.Name == "" {
			last.Arguments += s
			return
		}
	}
	p.out = append(p.out, Delta{ToolCall: &ToolCallDelta{Index: p.call, Arguments: s}})
}

// parseTag splits `name k="v" k2="v2"` and undoes the template's escape_attr.
func parseTag(body string) (string, map[string]string) {
	name, rest, _ := strings.Cut(body, " ")
	attrs := map[string]string{}
	for {
		rest = strings.TrimLeft(rest, " ")
		k, after, ok := strings.Cut(rest, `="`)
		if !ok || k == "" || strings.Contains(k, " ") {
			break
		}
		v, tail, ok := strings.Cut(after, `"`)
		if !ok {
			break
		}
		attrs[k] = strings.ReplaceAll(strings.ReplaceAll(v, "&quot;", `"`), "&amp;", "&")
		rest = tail
	}
	return name, attrs
}

// escapeJSONInner escapes s for the inside of a JSON string byte by byte, so
// escaping chunks gives the same text as escaping their concatenation.
func escapeJSONInner(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if c < 0x20 {
				const hex = "0123456789abcdef"
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&15])
			} else {
				b.WriteByte(c)
			}
		}
	}
	return b.String()
}
