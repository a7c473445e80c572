package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/k3-inference/k3/core/grammar"
)

// Qwen3-Coder's reply format, which llama.cpp builds in
// common_chat_params_init_qwen3_coder for every template with <tool_call>,
// <function= and <parameter= (Qwen3-Coder; with <think> reasoning Qwen3.5
// and Nemotron 3 Nano):
//
//	CONTENT<tool_call>
//	<function=NAME>
//	<parameter=KEY>
//	VALUE
//	</parameter>
//	</function>
//	</tool_call>
//
// A value is text up to "\n</parameter>\n" when the parameter's schema can
// be a string (common_schema_info::resolves_to_string), else JSON; the
// arguments are those values in a JSON object, strings quoted. Required
// parameters come first, in any order, then optional ones, any number of
// times. Qwen3-Coder (no <think>) may leave out the first <tool_call>, so
// content also ends at a whole <function=NAME> opener.
//
// Where k3 departs from llama.cpp, on purpose (besides those of
// format_llama.go): the lazy grammar of tool_choice "auto" starts at
// <tool_call> only; llama.cpp also starts it at a bare <function=NAME>.
const (
	xmlCallOpen   = "<tool_call>\n"
	xmlCallClose  = "</tool_call>"
	xmlFuncOpen   = "<function="
	xmlFuncClose  = "</function>\n"
	xmlParamOpen  = "<parameter="
	xmlParamClose = "\n</parameter>\n"
	xmlNameEnd    = ">\n"

	// xmlMaxPermute: llama.cpp takes up to this many required parameters
	// in any order (COMMON_CHAT_MAX_PERMUTE), more in the schema's order.
	xmlMaxPermute = 6
)

// qwen3CoderFormat is Qwen3-Coder's; with think, Qwen3.5's (<think>
// reasoning, and every call opened by <tool_call>).
type qwen3CoderFormat struct{ think bool }

func (qwen3CoderFormat) assistant() string { return hermesAssistant }

func (f qwen3CoderFormat) newParser(o ParseOptions) replyParser {
	reasoning := pegEps
	if f.think && !o.ReasoningNone {
		reasoning = pegOpt(pegSeq(pegLit(thinkOpen), pegSpace,
			pegTag(tagReasoning, pegUntil(thinkClose, "<tool_call>")),
			pegChoice(pegLit(thinkClose), pegAnd(pegLit("<tool_call>")))))
	}
	if len(o.Tools) == 0 {
		return newPEGParser(o, pegSeq(reasoning, pegSpace, pegTag(tagContent, pegUntil())), thinkOpen)
	}
	json := pegJSON()
	argClose := pegAtomic(pegTag(tagToolArgClose, pegLit(xmlParamClose)))
	argString := pegSeq(pegTag(tagToolArgStringValue, pegUntil(xmlParamClose)), argClose)
	argJSON := pegSeq(pegTag(tagToolArgValue, json), argClose)
	starts := []string{"<tool_call>"}
	var tools []peg
	for _, t := range o.Tools {
		var required, optional []peg
		for _, p := range xmlParams(t) {
			open := pegAtomic(pegTag(tagToolArgOpen, pegSeq(pegLit(xmlParamOpen),
				pegAtomic(pegTag(tagToolArgName, pegLit(p.name))), pegLit(xmlNameEnd))))
			value := argJSON
			if p.str {
				value = argString
			}
			arg := pegTag(tagToolArg, pegSeq(open, value))
			if p.required {
				required = append(required, arg)
			} else {
				optional = append(optional, arg)
			}
		}
		args := pegPermute(required)
		if len(optional) > 0 {
			args = pegSeq(args, pegRep(pegChoice(optional...), 0, -1))
		}
		tools = append(tools, pegTag(tagTool, pegSeq(
			pegAtomic(pegTag(tagToolOpen, pegSeq(pegLit(xmlFuncOpen), pegAtomic(pegTag(tagToolName, pegLit(t.Name))), pegLit(xmlNameEnd)))),
			pegTag(tagToolArgs, args),
			pegAtomic(pegTag(tagToolClose, pegLit(xmlFuncClose))))))
		if !f.think {
			starts = append(starts, xmlFuncOpen+t.Name+">")
		}
	}
	body := pegSeq(pegChoice(tools...), pegLit(xmlCallClose), pegSpace)
	call := pegSeq(pegLit(xmlCallOpen), body)
	first := call
	if !f.think {
		first = pegSeq(pegOpt(pegLit(xmlCallOpen)), body)
	}
	calls := pegRep(pegSeq(first, pegRep(call, 0, -1)), 0, 1)
	// No end: llama.cpp's parser stops after the calls, and what follows
	// them is dropped.
	root := pegSeq(reasoning, pegSpace, pegTag(tagContent, pegUntil(starts...)), pegSpace, calls)
	return newPEGParser(o, root, thinkOpen)
}

// pegPermute matches every parser once, in any order (llama.cpp's
// common_chat_peg_builder::permute): one alternative per parser to go
// first, then the others the same way; past xmlMaxPermute, in order.
func pegPermute(ps []peg) peg {
	if len(ps) == 0 {
		return pegEps
	}
	if len(ps) == 1 || len(ps) > xmlMaxPermute {
		return pegSeq(ps...)
	}
	memo := map[uint32]peg{}
	var rest func(left uint32) peg
	rest = func(left uint32) peg {
		if left == 0 {
			return pegEps
		}
		if p, ok := memo[left]; ok {
			return p
		}
		var alts []peg
		for i, p := range ps {
			if bit := uint32(1) << i; left&bit != 0 {
				alts = append(alts, pegSeq(p, rest(left&^bit)))
			}
		}
		memo[left] = pegChoice(alts...)
		return memo[left]
	}
	return rest(1<<len(ps) - 1)
}

func (f qwen3CoderFormat) forcedCall(o ParseOptions, name string) string {
	s := closeThink(o)
	if s != "" {
		s += "\n\n"
	}
	s += xmlCallOpen + xmlFuncOpen
	if name != "" {
		s += name + xmlNameEnd
	}
	return s
}

// grammar: llama.cpp's grammar for these calls (a string value is any text
// up to its closing tag, any other value JSON of its schema), after
// <tool_call>.
func (f qwen3CoderFormat) grammar(o ParseOptions, c Constraint) (string, string, error) {
	b := grammar.NewSchemaBuilder()
	ws := spaceRule(b)
	calls := func() (callRules, error) {
		if len(o.Tools) == 0 {
			return callRules{}, fmt.Errorf("tool calls are constrained but no tools are declared")
		}
		str := b.Until("xml-arg-string", xmlParamClose)
		args := map[string]string{}
		var alts []string
		for i, t := range o.Tools {
			var required, optional []string
			for j, p := range xmlParams(t) {
				value := str
				if !p.str {
					r, err := b.AddAt(fmt.Sprintf("tool%d-arg%d-value", i, j), t.Parameters, "properties", p.name)
					if err != nil {
						return callRules{}, fmt.Errorf("tool %q parameters: %w", t.Name, err)
					}
					value = r + " " + lit(xmlParamClose)
				}
				arg := b.Rule(fmt.Sprintf("tool%d-arg%d", i, j), lit(xmlParamOpen+p.name+xmlNameEnd)+" "+value)
				if p.required {
					required = append(required, arg)
				} else {
					optional = append(optional, arg)
				}
			}
			body := permuteRule(b, fmt.Sprintf("tool%d-required", i), required)
			if len(optional) > 0 {
				body += " (" + strings.Join(optional, " | ") + ")*"
			}
			args[t.Name] = b.Rule(fmt.Sprintf("tool%d-args", i), body) + " " + lit(xmlFuncClose)
			alts = append(alts, lit(t.Name+xmlNameEnd)+" "+args[t.Name])
		}
		named := b.Rule("named-call", "("+strings.Join(alts, " | ")+")")
		close := lit(xmlCallClose) + " " + ws
		more := b.Rule("more-calls", "("+lit(xmlCallOpen+xmlFuncOpen)+" "+named+" "+close+")*")
		return callRules{args: args, afterOpener: named + " " + close + " " + more,
			afterTrigger: lit("\n"+xmlFuncOpen) + " " + named + " " + close + " " + more}, nil
	}
	open, shut := "", ""
	if f.think {
		open, shut = thinkOpen, thinkClose
	}
	return llamaGrammar(b, o, c, calls, "<tool_call>",
		func(args string) string { return args + " " + lit(xmlCallClose) + " " + ws }, open, shut)
}

// permuteRule is GBNF for every rule of rs once, in any order, as
// pegPermute parses them.
func permuteRule(b *grammar.SchemaBuilder, name string, rs []string) string {
	if len(rs) == 0 {
		return `""`
	}
	if len(rs) == 1 || len(rs) > xmlMaxPermute {
		return strings.Join(rs, " ")
	}
	memo := map[uint32]string{}
	var rest func(left uint32) string
	rest = func(left uint32) string {
		if r, ok := memo[left]; ok {
			return r
		}
		var alts []string
		for i, r := range rs {
			if bit := uint32(1) << i; left&bit != 0 {
				if left == bit {
					alts = append(alts, r)
				} else {
					alts = append(alts, r+" "+rest(left&^bit))
				}
			}
		}
		memo[left] = b.Rule(name+"-"+strconv.Itoa(int(left)), strings.Join(alts, " | "))
		return memo[left]
	}
	return rest(1<<len(rs) - 1)
}

// xmlParam is one parameter of a tool, as llama.cpp's foreach_parameter
// lists them: the schema's properties in their order.
type xmlParam struct {
	name     string
	required bool
	str      bool // its value is text, not JSON
}

// xmlParams lists a tool's parameters: none unless its parameters are an
// object with an object of properties.
func xmlParams(t Tool) []xmlParam {
	var root map[string]json.RawMessage
	if json.Unmarshal(t.Parameters, &root) != nil {
		return nil
	}
	names, props := orderedMembers(root["properties"])
	if props == nil {
		return nil
	}
	var reqList []any
	_ = json.Unmarshal(root["required"], &reqList)
	required := map[string]bool{}
	for _, r := range reqList {
		if s, ok := r.(string); ok {
			required[s] = true
		}
	}
	var doc any
	_ = json.Unmarshal(t.Parameters, &doc)
	var out []xmlParam
	for _, n := range names {
		var s any
		_ = json.Unmarshal(props[n], &s)
		out = append(out, xmlParam{name: n, required: required[n], str: schemaString(s, doc, map[string]bool{})})
	}
	return out
}

// orderedMembers are an object's keys in order (a repeated key where it
// first appears, with its last value, as ordered_json keeps it) and their
// values; nil when raw is not an object.
func orderedMembers(raw json.RawMessage) ([]string, map[string]json.RawMessage) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil
	}
	var names []string
	vals := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil
		}
		if _, seen := vals[k]; !seen {
			names = append(names, k)
		}
		vals[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil
	}
	return names, vals
}

// schemaString is common_schema_info::resolves_to_string: whether any
// branch of the schema s (in the document doc, for its #/ references)
// allows a string.
func schemaString(s, doc any, seen map[string]bool) bool {
	o, ok := s.(map[string]any)
	if !ok {
		return false
	}
	if r, ok := o["$ref"]; ok {
		ref, _ := r.(string)
		if seen[ref] {
			return false // a cycle
		}
		seen[ref] = true
		target, ok := jsonPointer(doc, ref)
		return ok && schemaString(target, doc, seen)
	}
	switch t := o["type"].(type) {
	case string:
		if t == "string" {
			return true
		}
	case []any:
		for _, x := range t {
			if x == "string" {
				return true
			}
		}
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		for _, alt := range jsonItems(o[k]) {
			if schemaString(alt, doc, seen) {
				return true
			}
		}
	}
	if all, ok := o["allOf"]; ok {
		every := true
		for _, c := range jsonItems(all) {
			if !schemaString(c, doc, seen) {
				every = false
				break
			}
		}
		if every {
			return true
		}
	}
	if _, ok := o["const"].(string); ok {
		return true
	}
	for _, v := range jsonItems(o["enum"]) {
		if _, ok := v.(string); ok {
			return true
		}
	}
	for _, k := range []string{"pattern", "minLength", "maxLength"} {
		if _, ok := o[k]; ok {
			return true
		}
	}
	if f, ok := o["format"].(string); ok {
		switch f {
		case "date", "time", "date-time", "uri", "email", "hostname", "ipv4", "ipv6", "uuid":
			return true
		}
		return strings.HasPrefix(f, "uuid")
	}
	return false
}

// jsonItems is what a range over a JSON value visits in nlohmann's json:
// an array's items, an object's values, nothing for null, else the value.
func jsonItems(v any) []any {
	switch x := v.(type) {
	case nil:
		return nil
	case []any:
		return x
	case map[string]any:
		var out []any
		for _, y := range x {
			out = append(out, y)
		}
		return out
	}
	return []any{v}
}

// jsonPointer resolves a "#/a/b" reference into doc as llama.cpp's
// resolve_refs does (no ~ escapes); false for any other reference.
func jsonPointer(doc any, ref string) (any, bool) {
	frag, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, false
	}
	target := doc
	for _, tok := range strings.Split(frag, "/") {
		switch x := target.(type) {
		case map[string]any:
			v, ok := x[tok]
			if !ok {
				return nil, false
			}
			target = v
		case []any:
			i, err := strconv.ParseUint(tok, 10, 64)
			if err != nil || i >= uint64(len(x)) {
				return nil, false
			}
			target = x[i]
		default:
			return nil, false
		}
	}
	return target, true
}
