package chat

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/k3-inference/k3/core/grammar"
)

// The formats llama.cpp parses with PEG parsers: each builds the parser
// llama.cpp builds for its template (common_chat_params_init_kimi_k2; for
// DeepSeek V3.1, R1 and Qwen3/Hermes what the autoparser generates from those
// templates), with tool_choice "auto" and parallel calls. The parsers start
// after the generation prompt's assistant marker (ParseOptions.Prefix).
//
// Where k3 departs from llama.cpp, on purpose:
//   - tool_choice "required" or a named function: llama.cpp lets the model
//     reason and write content before the call, under a grammar over the
//     whole reply; k3 writes the call's opening into the prompt
//     (ForcedCall), as for Kimi K3, and constrains the rest. The lazy
//     grammar of "auto" starts at llama.cpp's trigger.
//   - Kimi K2 with response_format: llama.cpp builds no grammar (the
//     format is ignored); k3 holds the content to the schema.
//   - a finished reply that does not match the format: llama-server
//     answers an error; k3 keeps the longest prefix that parses (pegParser).

const (
	k2Assistant    = "<|im_assistant|>assistant<|im_middle|>"
	k2SectionBegin = "<|tool_calls_section_begin|>"
	k2SectionEnd   = "<|tool_calls_section_end|>"
	k2CallBegin    = "<|tool_call_begin|>"
	k2ArgsBegin    = "<|tool_call_argument_begin|>"
	k2CallEnd      = "<|tool_call_end|>"

	dsAssistant  = "<｜Assistant｜>"
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"

	hermesAssistant = "<|im_start|>assistant\n"
	hermesCallOpen  = "<tool_call>\n"
	hermesCallClose = "</tool_call>"
)

// contentFormat: everything is content; no calls to force or constrain.
type contentFormat struct{}

func (contentFormat) assistant() string { return "" }

func (contentFormat) newParser(o ParseOptions) replyParser {
	return newPEGParser(o, pegSeq(pegTag(tagContent, pegUntil()), pegEnd), "")
}

func (contentFormat) forcedCall(ParseOptions, string) string { return "" }

func (contentFormat) grammar(o ParseOptions, c Constraint) (string, string, error) {
	if c.Force || c.Tools {
		return "", "", fmt.Errorf("this template's format has no tool calls")
	}
	return contentGrammar(grammar.NewSchemaBuilder(), c, "", "")
}

// toolPEGs is one parser per declared tool, made by each.
func toolPEGs(o ParseOptions, each func(name string) peg) peg {
	var alts []peg
	for _, t := range o.Tools {
		alts = append(alts, each(t.Name))
	}
	return pegChoice(alts...)
}

// kimiK2Format is Kimi K2's (Instruct and Thinking).
type kimiK2Format struct{}

func (kimiK2Format) assistant() string { return k2Assistant }

func (kimiK2Format) newParser(o ParseOptions) replyParser {
	reasoning := pegEps
	if !o.ReasoningNone {
		reasoning = pegOpt(pegSeq(pegLit(thinkOpen),
			pegTag(tagReasoning, pegUntil(thinkClose, k2SectionBegin, k2CallBegin)), pegOpt(pegLit(thinkClose))))
	}
	if len(o.Tools) == 0 {
		return newPEGParser(o, pegSeq(reasoning, pegTag(tagContent, pegUntil()), pegEnd), thinkOpen)
	}
	json := pegJSON()
	tool := toolPEGs(o, func(name string) peg {
		id := pegSeq(pegLit("functions."), pegAtomic(pegTag(tagToolName, pegLit(name))), pegLit(":"), pegChars(runeRange('0', '9'), 1, -1))
		return pegTag(tagTool, pegSeq(
			pegAtomic(pegTag(tagToolOpen, pegSeq(pegAtomic(pegTag(tagToolID, id)), pegLit(k2ArgsBegin)))),
			pegTag(tagToolArgs, json),
			pegAtomic(pegTag(tagToolClose, pegOpt(pegLit(k2CallEnd))))))
	})
	root := pegSeq(reasoning, pegTag(tagContent, pegUntil(k2SectionBegin, k2CallBegin)),
		pegOpt(pegLit(k2SectionBegin)), pegRep(pegSeq(pegLit(k2CallBegin), tool), 0, -1), pegOpt(pegLit(k2SectionEnd)), pegEnd)
	return newPEGParser(o, root, thinkOpen)
}

func (kimiK2Format) forcedCall(o ParseOptions, name string) string {
	s := closeThink(o) + k2SectionBegin + k2CallBegin + "functions."
	if name != "" {
		s += name + ":0" + k2ArgsBegin
	}
	return s
}

// grammar: after llama.cpp's trigger <|tool_call_begin|>, calls as its
// grammar writes them.
func (kimiK2Format) grammar(o ParseOptions, c Constraint) (string, string, error) {
	b := grammar.NewSchemaBuilder()
	calls := func() (callRules, error) {
		args, err := toolArgRules(b, o)
		if err != nil {
			return callRules{}, err
		}
		var alts []string
		for _, t := range o.Tools {
			alts = append(alts, lit(t.Name+":")+` [0-9]+ `+lit(k2ArgsBegin)+" "+args[t.Name]+" ("+lit(k2CallEnd)+")?")
		}
		named := b.Rule("named-call", "("+strings.Join(alts, " | ")+")")
		more := b.Rule("more-calls", "("+lit(k2CallBegin+"functions.")+" "+named+")* ("+lit(k2SectionEnd)+")?")
		return callRules{args: args, afterOpener: named + " " + more, afterTrigger: lit("functions.") + " " + named + " " + more}, nil
	}
	return llamaGrammar(b, o, c, calls, k2CallBegin,
		func(args string) string { return args + " (" + lit(k2CallEnd) + ")? (" + lit(k2SectionEnd) + ")?" },
		"", "")
}

// deepSeekFormat is DeepSeek V3.1's; with r1 DeepSeek R1's, whose calls
// are <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{json}```<｜tool▁call▁end｜>.
type deepSeekFormat struct{ r1 bool }

const (
	r1Function = "function"
	r1Open     = "\n```json\n"
	r1Close    = "```"
)

func (deepSeekFormat) assistant() string { return dsAssistant }

func (f deepSeekFormat) newParser(o ParseOptions) replyParser {
	reasoning := pegEps
	if !o.ReasoningNone {
		reasoning = pegOpt(pegSeq(pegLit(thinkOpen), pegTag(tagReasoning, pegUntil(thinkClose)), pegLit(thinkClose)))
	}
	if len(o.Tools) == 0 {
		return newPEGParser(o, pegSeq(pegSpace, reasoning, pegTag(tagContent, pegUntil()), pegEnd), thinkOpen)
	}
	json := pegJSON()
	tool := toolPEGs(o, func(name string) peg {
		if f.r1 {
			return pegSeq(
				pegAtomic(pegTag(tagToolOpen, pegSeq(pegLit(dsSep), pegAtomic(pegTag(tagToolName, pegLit(name))), pegLit(r1Open)))),
				pegSpace, pegTag(tagToolArgs, json), pegSpace, pegAtomic(pegTag(tagToolClose, pegLit(r1Close))))
		}
		return pegSeq(
			pegAtomic(pegTag(tagToolOpen, pegSeq(pegAtomic(pegTag(tagToolName, pegLit(name))), pegLit(dsSep)))),
			pegSpace, pegTag(tagToolArgs, json), pegAtomic(pegTag(tagToolClose, pegAnd(pegLit(dsCallEnd)))))
	})
	begin := dsCallBegin
	if f.r1 {
		begin += r1Function
	}
	one := pegSeq(pegLit(begin), tool, pegLit(dsCallEnd))
	calls := pegSeq(pegLit(dsCallsBegin), pegSpace, one, pegRep(pegSeq(pegSpace, one), 0, -1), pegSpace, pegLit(dsCallsEnd))
	root := pegSeq(pegSpace, reasoning, pegOpt(pegTag(tagContent, pegUntil(dsCallsBegin))), pegOpt(calls), pegEnd)
	return newPEGParser(o, root, thinkOpen)
}

// callOpen is the text of a call up to its name.
func (f deepSeekFormat) callOpen() string {
	if f.r1 {
		return dsCallBegin + r1Function + dsSep
	}
	return dsCallBegin
}

func (f deepSeekFormat) forcedCall(o ParseOptions, name string) string {
	s := closeThink(o) + dsCallsBegin + f.callOpen()
	if name != "" {
		s += name + f.afterName()
	}
	return s
}

// afterName is what separates a call's name from its arguments.
func (f deepSeekFormat) afterName() string {
	if f.r1 {
		return r1Open
	}
	return dsSep
}

func (f deepSeekFormat) grammar(o ParseOptions, c Constraint) (string, string, error) {
	b := grammar.NewSchemaBuilder()
	ws := spaceRule(b)
	argsEnd := ""
	if f.r1 {
		argsEnd = " " + ws + " " + lit(r1Close)
	}
	calls := func() (callRules, error) {
		args, err := toolArgRules(b, o)
		if err != nil {
			return callRules{}, err
		}
		var alts []string
		for _, t := range o.Tools {
			alts = append(alts, lit(t.Name+f.afterName())+" "+ws+" "+args[t.Name]+argsEnd)
		}
		named := b.Rule("named-call", "("+strings.Join(alts, " | ")+") "+lit(dsCallEnd))
		more := b.Rule("more-calls", "("+ws+" "+lit(f.callOpen())+" "+named+")* "+ws+" "+lit(dsCallsEnd))
		return callRules{args: args, afterOpener: named + " " + more, afterTrigger: ws + " " + lit(f.callOpen()) + " " + named + " " + more}, nil
	}
	return llamaGrammar(b, o, c, calls, dsCallsBegin,
		func(args string) string {
			return ws + " " + args + argsEnd + " " + lit(dsCallEnd) + " " + ws + " " + lit(dsCallsEnd)
		},
		thinkOpen, thinkClose)
}

// hermesFormat is Hermes 2 Pro's, with <think> reasoning for Qwen3.
type hermesFormat struct{ think bool }

func (hermesFormat) assistant() string { return hermesAssistant }

func (f hermesFormat) newParser(o ParseOptions) replyParser {
	reasoning := pegEps
	if f.think && !o.ReasoningNone {
		nl := pegOpt(pegLit("\n"))
		reasoning = pegOpt(pegSeq(pegLit(thinkOpen), nl, pegTag(tagReasoning, pegUntil(thinkClose)), nl, pegLit(thinkClose), nl, nl))
	}
	if len(o.Tools) == 0 {
		return newPEGParser(o, pegSeq(pegSpace, reasoning, pegTag(tagContent, pegUntil()), pegEnd), thinkOpen)
	}
	json := pegJSON()
	tool := toolPEGs(o, func(name string) peg {
		return pegTag(tagTool, pegSeq(
			pegAtomic(pegTag(tagToolOpen, pegLit("{"))), pegSpace,
			pegLit(`"name"`), pegSpace, pegLit(":"), pegSpace,
			pegAtomic(pegSeq(pegLit(`"`), pegAtomic(pegTag(tagToolName, pegLit(name))), pegLit(`"`))), pegSpace,
			pegLit(","), pegSpace, pegLit(`"arguments"`), pegSpace, pegLit(":"), pegSpace,
			pegTag(tagToolArgs, json), pegSpace, pegAtomic(pegTag(tagToolClose, pegLit("}")))))
	})
	call := pegSeq(pegLit(hermesCallOpen), pegSpace, tool,
		pegRep(pegSeq(pegSpace, pegLit(","), pegSpace, tool), 0, -1), pegSpace, pegLit(hermesCallClose))
	root := pegSeq(pegSpace, reasoning, pegOpt(pegTag(tagContent, pegUntil(hermesCallOpen))),
		pegRep(pegSeq(pegOpt(call), pegSpace), 1, -1), pegEnd)
	return newPEGParser(o, root, thinkOpen)
}

func (hermesFormat) forcedCall(o ParseOptions, name string) string {
	s := closeThink(o)
	if s != "" {
		s += "\n\n"
	}
	s += hermesCallOpen + `{"name": "`
	if name != "" {
		s += name + `", "arguments": `
	}
	return s
}

func (f hermesFormat) grammar(o ParseOptions, c Constraint) (string, string, error) {
	b := grammar.NewSchemaBuilder()
	ws := spaceRule(b)
	body := func(args map[string]string) string {
		var alts []string
		for _, t := range o.Tools {
			alts = append(alts, lit(t.Name+`"`)+" "+ws+` "," `+ws+` "\"arguments\"" `+ws+` ":" `+ws+" "+args[t.Name]+" "+ws+` "}"`)
		}
		return b.Rule("named-call", "("+strings.Join(alts, " | ")+")")
	}
	calls := func() (callRules, error) {
		args, err := toolArgRules(b, o)
		if err != nil {
			return callRules{}, err
		}
		named := body(args)
		obj := b.Rule("call-object", `"{" `+ws+` "\"name\"" `+ws+` ":" `+ws+` "\"" `+named)
		close := b.Rule("call-close", "("+ws+` "," `+ws+" "+obj+")* "+ws+" "+lit(hermesCallClose))
		more := b.Rule("more-calls", "("+ws+" "+lit(hermesCallOpen)+" "+ws+" "+obj+" "+close+")* "+ws)
		return callRules{args: args, afterOpener: named + " " + close + " " + more, afterTrigger: ws + " " + obj + " " + close + " " + more}, nil
	}
	open, shut := "", ""
	if f.think {
		open, shut = thinkOpen, thinkClose
	}
	return llamaGrammar(b, o, c, calls, hermesCallOpen,
		func(args string) string {
			return args + " " + ws + ` "}" ` + ws + " " + lit(hermesCallClose) + " " + ws
		}, open, shut)
}

// closeThink closes the think section the generation prompt opened.
func closeThink(o ParseOptions) string {
	if o.Thinking {
		return thinkClose
	}
	return ""
}

func lit(s string) string { return grammar.Literal(s) }

// spaceRule is llama.cpp's space rule of tool-call grammars.
func spaceRule(b *grammar.SchemaBuilder) string {
	return b.Rule("ws", `| " " | "\n"{1,2} [ \t]{0,20}`)
}

// toolArgRules adds each tool's parameter schema; a tool without one takes
// any object.
func toolArgRules(b *grammar.SchemaBuilder, o ParseOptions) (map[string]string, error) {
	if len(o.Tools) == 0 {
		return nil, fmt.Errorf("tool calls are constrained but no tools are declared")
	}
	rules := map[string]string{}
	for i, t := range o.Tools {
		params := bytes.TrimSpace(t.Parameters)
		if len(params) == 0 || bytes.Equal(params, []byte("null")) {
			params = []byte(`{"type":"object"}`)
		}
		r, err := b.Add(fmt.Sprintf("tool%d-args", i), params)
		if err != nil {
			return nil, fmt.Errorf("tool %q parameters: %w", t.Name, err)
		}
		rules[t.Name] = r
	}
	return rules, nil
}

// callRules are a format's tool-call rules: each tool's arguments, and
// the reply from where ForcedCall with no name stops, and from the end of
// the trigger, to its end.
type callRules struct {
	args                      map[string]string
	afterOpener, afterTrigger string
}

// llamaGrammar assembles a reply grammar of a llama.cpp format from its
// pieces: calls adds the tool-call rules, trigger is llama.cpp's lazy
// grammar trigger, named closes the reply after the arguments of a call
// ForcedCall named, open and shut are the format's reasoning tags (""
// when it has none).
func llamaGrammar(b *grammar.SchemaBuilder, o ParseOptions, c Constraint,
	calls func() (callRules, error), trigger string, named func(args string) string,
	open, shut string) (string, string, error) {
	if c.Force || c.Tools {
		cr, err := calls()
		if err != nil {
			return "", "", err
		}
		args := cr.args
		switch {
		case c.Force && c.ForceName != "":
			// A named function is called once.
			var r string
			for _, t := range o.Tools {
				if t.Name == c.ForceName {
					r = args[t.Name]
				}
			}
			if r == "" {
				return "", "", fmt.Errorf("tool_choice names %q, which is not declared", c.ForceName)
			}
			b.Rule("root", named(r))
			return b.String(), "", nil
		case c.Force:
			b.Rule("root", cr.afterOpener)
			return b.String(), "", nil
		case c.Content == nil:
			// Free text until the model opens a call; from there the call.
			b.Rule("root", cr.afterTrigger)
			return b.String(), trigger, nil
		}
		return contentGrammar(b, c, lit(trigger)+" "+cr.afterTrigger, reasoningRule(b, o, open, shut))
	}
	return contentGrammar(b, c, "", reasoningRule(b, o, open, shut))
}

// reasoningRule is what may come before the content: the rest of the think
// section the prompt opened, or an optional one the model opens.
func reasoningRule(b *grammar.SchemaBuilder, o ParseOptions, open, shut string) string {
	if open == "" || o.ReasoningNone {
		return ""
	}
	if o.Thinking {
		return b.Until("reasoning", shut) + " "
	}
	return "(" + lit(open) + " " + b.Until("reasoning", shut) + ")? "
}

// contentGrammar holds the content to c.Content, as llama.cpp's
// response_format grammar does (bare, or in a ```json block), after
// reasoning; calls, when set, is the alternative of calling a tool.
func contentGrammar(b *grammar.SchemaBuilder, c Constraint, calls, reasoning string) (string, string, error) {
	if c.Content == nil {
		return "", "", fmt.Errorf("nothing to constrain")
	}
	content, err := b.Add("content", c.Content)
	if err != nil {
		return "", "", fmt.Errorf("response format: %w", err)
	}
	ws := spaceRule(b)
	body := "(" + lit("```json") + " " + ws + " " + content + " " + ws + ` "` + "```" + `" | ` + ws + " " + content + " " + ws + ")"
	if calls != "" {
		body = "(" + body + " | " + calls + ")"
	}
	b.Rule("root", reasoning+ws+" "+body)
	return b.String(), "", nil
}
