package chat

import "strings"

// Format is how a model writes its replies: where reasoning, content and
// tool calls are in the text. A template's format is found once, from its
// source (DetectFormat), the way llama.cpp chooses its parser.
type Format int

const (
	// FormatKimiK3 is Kimi K3's tagged format (<|open|>/<|close|>), k3's own
	// lenient parser; the zero value, k3's first model.
	FormatKimiK3 Format = iota
	// FormatContent: the reply is all content.
	FormatContent
	// FormatKimiK2: <think>, then <|tool_calls_section_begin|> with calls
	// <|tool_call_begin|>functions.NAME:I<|tool_call_argument_begin|>{json}<|tool_call_end|>.
	FormatKimiK2
	// FormatDeepSeekV3: DeepSeek V3.1's <think>, then <｜tool▁calls▁begin｜>
	// with calls <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>.
	FormatDeepSeekV3
	// FormatDeepSeekR1: DeepSeek R1's <think>, then calls
	// <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{json}```<｜tool▁call▁end｜>.
	FormatDeepSeekR1
	// FormatHermes: Hermes 2 Pro's <tool_call>\n{"name": ..., "arguments": {...}}</tool_call>.
	FormatHermes
	// FormatQwen3: FormatHermes with <think> reasoning (Qwen3, Qwen3 MoE).
	FormatQwen3
	// FormatQwen3Coder: Qwen3-Coder's <tool_call>\n<function=NAME>\n
	// <parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>,
	// values typed by the tool's parameter schema (format_qwen3coder.go).
	FormatQwen3Coder
	// FormatQwen35: FormatQwen3Coder's calls with <think> reasoning
	// (Qwen3.5, Nemotron 3 Nano).
	FormatQwen35
)

var formatNames = map[Format]string{
	FormatKimiK3: "kimi-k3", FormatContent: "content", FormatKimiK2: "kimi-k2",
	FormatDeepSeekV3: "deepseek-v3", FormatDeepSeekR1: "deepseek-r1", FormatHermes: "hermes", FormatQwen3: "qwen3",
	FormatQwen3Coder: "qwen3-coder", FormatQwen35: "qwen3.5",
}

func (f Format) String() string {
	if s, ok := formatNames[f]; ok {
		return s
	}
	return "unknown"
}

// DetectFormat picks a template's reply format from markers in its source,
// in llama.cpp's order (common_chat_try_specialized_template, then what its
// autoparser finds in these families' templates). A template none of them
// matches gets FormatContent.
func DetectFormat(src string) Format {
	has := func(s ...string) bool {
		for _, x := range s {
			if !strings.Contains(src, x) {
				return false
			}
		}
		return true
	}
	switch {
	case has(k2SectionBegin, k2CallBegin):
		return FormatKimiK2
	case has(markOpen, markClose, markEnd):
		return FormatKimiK3
	case has("<tool_call>", xmlFuncOpen, xmlParamOpen):
		if has(thinkOpen) {
			return FormatQwen35
		}
		return FormatQwen3Coder
	case has(dsCallsBegin, dsSep, "```json"):
		return FormatDeepSeekR1
	case has(dsCallsBegin, dsSep):
		return FormatDeepSeekV3
	case has("<tool_call>") && !has(xmlFuncOpen):
		if has(thinkOpen) {
			return FormatQwen3
		}
		return FormatHermes
	}
	return FormatContent
}

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// replyFormat is one format's parser, forced call and grammar. The Kimi K3
// format implements it in parse.go and grammar.go, the llama.cpp formats in
// format_llama.go.
type replyFormat interface {
	// assistant is the marker the generation prompt ends with, before
	// whatever the reply continues (ParseOptions.Prefix).
	assistant() string
	newParser(o ParseOptions) replyParser
	forcedCall(o ParseOptions, name string) string
	grammar(o ParseOptions, c Constraint) (gbnf, trigger string, err error)
}

// replyParser parses one reply as it is generated.
type replyParser interface {
	feed(chunk string) []Delta
	close() []Delta
	result() Parsed
}

func (f Format) impl() replyFormat {
	switch f {
	case FormatContent:
		return contentFormat{}
	case FormatKimiK2:
		return kimiK2Format{}
	case FormatDeepSeekV3:
		return deepSeekFormat{}
	case FormatDeepSeekR1:
		return deepSeekFormat{r1: true}
	case FormatHermes:
		return hermesFormat{think: false}
	case FormatQwen3:
		return hermesFormat{think: true}
	case FormatQwen3Coder:
		return qwen3CoderFormat{}
	case FormatQwen35:
		return qwen3CoderFormat{think: true}
	}
	return kimiK3Format{}
}

// parseOptions describes the reply to a prompt whose generation prompt is
// gen: what the reply continues, and whether it starts inside reasoning.
func (f Format) parseOptions(gen string, tools []Tool) ParseOptions {
	o := ParseOptions{Format: f, Tools: tools}
	if f == FormatKimiK3 {
		o.Thinking = strings.HasSuffix(gen, markOpen+"think"+markSep)
		return o
	}
	if m := f.impl().assistant(); m != "" {
		if i := strings.LastIndex(gen, m); i >= 0 {
			o.Prefix = gen[i+len(m):]
		}
	}
	o.Thinking = strings.LastIndex(o.Prefix, thinkOpen) > strings.LastIndex(o.Prefix, thinkClose)
	return o
}
