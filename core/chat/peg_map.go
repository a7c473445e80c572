package chat

import "strings"

// Tags the formats put around the pieces of a reply (llama.cpp's
// common_chat_peg_builder names).
const (
	tagReasoning = "reasoning"
	tagContent   = "content"
	tagTool      = "tool"
	tagToolOpen  = "tool-open"
	tagToolClose = "tool-close"
	tagToolID    = "tool-id"
	tagToolName  = "tool-name"
	tagToolArgs  = "tool-args"

	// One argument of a call whose arguments are written one by one
	// (Qwen3-Coder's <parameter=KEY>): its name, then a JSON value or
	// text that becomes a JSON string.
	tagToolArg            = "tool-arg"
	tagToolArgOpen        = "tool-arg-open"
	tagToolArgClose       = "tool-arg-close"
	tagToolArgName        = "tool-arg-name"
	tagToolArgValue       = "tool-arg-value"
	tagToolArgStringValue = "tool-arg-string-value"
)

// pegMapper turns tagged spans into a reply the way llama.cpp's
// common_chat_peg_mapper does: a call shows once its name is whole, with
// arguments "{" until they start; when its close is seen, open braces are
// closed. Arguments written one by one become a JSON object, a string
// value's closing quote added when its close is seen. Whitespace-only
// reasoning is no reasoning.
type pegMapper struct {
	res      Parsed
	pending  *ToolCall // opened, not yet named
	current  int       // index of the named call being filled, -1 if none
	buffer   string    // arguments seen before the name
	argCount int       // arguments of the call so far
	quote    bool      // a string value is open
}

func mapReply(nodes []*pegNode) Parsed {
	m := &pegMapper{current: -1}
	for _, n := range nodes {
		m.visit(n)
	}
	if m.pending != nil && m.pending.Function.Name != "" {
		m.res.ToolCalls = append(m.res.ToolCalls, *m.pending)
	}
	if strings.TrimLeft(m.res.Reasoning, " \n\r\t") == "" {
		m.res.Reasoning = ""
	}
	return m.res
}

func (m *pegMapper) visit(n *pegNode) {
	m.node(n)
	for _, c := range n.children {
		m.visit(c)
	}
}

// tool is the call the mapper's tags apply to: the pending one until it is
// named, then the named one.
func (m *pegMapper) tool() *ToolCall {
	if m.pending != nil {
		return m.pending
	}
	if m.current >= 0 {
		return &m.res.ToolCalls[m.current]
	}
	return nil
}

func (m *pegMapper) args() *string {
	if t := m.tool(); t != nil && t.Function.Name != "" {
		return &t.Function.Arguments
	}
	return &m.buffer
}

func (m *pegMapper) node(n *pegNode) {
	switch n.tag {
	case tagReasoning:
		m.res.Reasoning += n.text
	case tagContent:
		m.res.Content += n.text
	case tagToolOpen:
		m.pending = &ToolCall{Type: "function"}
		m.current = -1
		m.buffer = ""
		m.argCount = 0
		m.quote = false
	case tagToolID:
		if t := m.tool(); t != nil {
			id := strings.TrimRight(n.text, " \t\n\r\v\f")
			if len(id) >= 2 && id[0] == '"' && id[len(id)-1] == '"' {
				id = id[1 : len(id)-1]
			}
			t.ID = id
		}
	case tagToolName:
		t := m.tool()
		if t == nil {
			return
		}
		t.Function.Name = strings.TrimRight(n.text, " \t\n\r\v\f")
		if m.buffer != "" {
			t.Function.Arguments = m.buffer
			m.buffer = ""
		} else if t.Function.Arguments == "" {
			t.Function.Arguments = "{"
		}
		if m.pending != nil {
			m.res.ToolCalls = append(m.res.ToolCalls, *m.pending)
			m.pending = nil
			m.current = len(m.res.ToolCalls) - 1
		}
	case tagToolArgs:
		if m.tool() == nil {
			return
		}
		if text := strings.TrimRight(n.text, " \t\n\r\v\f"); strings.HasPrefix(text, "{") {
			*m.args() = text
		}
	case tagToolArgOpen:
		m.quote = false
	case tagToolArgName:
		if m.tool() == nil {
			return
		}
		entry := ""
		if m.argCount > 0 {
			entry = ","
		}
		entry += `"` + escapeJSONInner(trimArgName(n.text)) + `":`
		m.argCount++
		if a := m.args(); *a == "" {
			*a = "{"
		}
		*m.args() += entry
	case tagToolArgValue, tagToolArgStringValue:
		if m.tool() == nil {
			return
		}
		switch {
		case n.tag == tagToolArgStringValue && n.text == "":
			*m.args() += `"`
			m.quote = true
		case n.tag == tagToolArgStringValue:
			if !m.quote {
				*m.args() += `"`
				m.quote = true
			}
			*m.args() += escapeJSONInner(n.text)
		case n.text != "":
			// JSON as the format's parser matched it. llama.cpp turns
			// Python literals and quotes into JSON here
			// (normalize_quotes_to_json), which leaves JSON as it is.
			*m.args() += n.text
		}
	case tagToolArgClose:
		if m.tool() != nil && m.quote {
			*m.args() += `"`
			m.quote = false
		}
	case tagToolClose:
		t := m.tool()
		if t == nil {
			return
		}
		if t.Function.Name == "" && m.buffer != "" {
			t.Function.Arguments = m.buffer
			m.buffer = ""
		}
		if m.quote {
			t.Function.Arguments += `"`
			m.quote = false
		}
		for d := braceDepth(t.Function.Arguments); d > 0; d-- {
			t.Function.Arguments += "}"
		}
		if m.pending != nil {
			if m.pending.Function.Name != "" {
				m.res.ToolCalls = append(m.res.ToolCalls, *m.pending)
			}
			m.pending = nil
		}
	}
}

// trimArgName is llama.cpp's trim of an argument name: one leading space
// character at most, every trailing one.
func trimArgName(s string) string {
	if s != "" && isCSpace(s[0]) {
		s = s[1:]
	}
	return strings.TrimRight(s, " \t\n\v\f\r")
}

// braceDepth counts the '{' left open in JSON-like text, outside strings.
func braceDepth(s string) int {
	depth, inString, escaped := 0, false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case c == '\\' && inString:
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && c == '{':
			depth++
		case !inString && c == '}':
			depth--
		}
	}
	return depth
}
