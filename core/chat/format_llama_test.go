package chat

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/synth"
)

// formatTemplate is a template of one of the llama.cpp formats with the
// kwargs of a case (the thinking switch).
type formatTemplate struct {
	name   string
	src    string
	format Format
	kwargs map[string]json.RawMessage
}

func llamaFormatTemplates() []formatTemplate {
	off := map[string]json.RawMessage{"enable_thinking": json.RawMessage("false")}
	r1, err := os.ReadFile("testdata/deepseek-r1.jinja") // models/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja
	if err != nil {
		panic(err)
	}
	q35, err := os.ReadFile("testdata/qwen3.5.jinja") // models/templates/Qwen3.5-4B.jinja
	if err != nil {
		panic(err)
	}
	return []formatTemplate{
		{"kimi-k2", synth.KimiK2Template, FormatKimiK2, nil},
		{"deepseek-v3", synth.DeepSeekV3Template, FormatDeepSeekV3, nil},
		{"deepseek-v3/thinking_off", synth.DeepSeekV3Template, FormatDeepSeekV3, off},
		{"qwen3", synth.Qwen3ChatTemplate, FormatQwen3, nil},
		{"qwen3/thinking_off", synth.Qwen3ChatTemplate, FormatQwen3, off},
		{"deepseek-r1", string(r1), FormatDeepSeekR1, nil},
		{"qwen3-coder", synth.Qwen3CoderChatTemplate, FormatQwen3Coder, nil},
		{"qwen3.5", string(q35), FormatQwen35, nil},
		{"qwen3.5/thinking_off", string(q35), FormatQwen35, off},
	}
}

// llamaTestTools are the tools the replies below call.
var llamaTestTools = []Tool{weatherTool, searchTool, editTool}

// parseOptionsFor is what k3 serve parses a reply to a one-message
// conversation with: the template's own ParseOptions.
func parseOptionsFor(t *testing.T, ft formatTemplate, tools []Tool) ParseOptions {
	t.Helper()
	tmpl, err := New(ft.src)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Format() != ft.format {
		t.Fatalf("%s: format %v, want %v", ft.name, tmpl.Format(), ft.format)
	}
	in := Input{Messages: []Message{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true, Tools: tools, Kwargs: ft.kwargs}
	if v, ok := ft.kwargs["enable_thinking"]; ok {
		on := string(v) == "true"
		in.EnableThinking = &on
	}
	o, err := tmpl.ParseOptions(in)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// formatReplies are replies in each format: the fixtures of llama.cpp's
// tests/test-chat.cpp for these templates, and the edges of streaming
// (markers cut short, arguments open, malformed and undeclared calls).
var formatReplies = map[Format][]string{
	FormatKimiK2: {
		"Hello, world!\nWhat's up?",
		"<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>" +
			`{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>`,
		"<think>I'm thinking about this</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0" +
			`<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>`,
		"Hello, world!\nWhat's up?<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0" +
			`<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|><|tool_calls_section_end|>`,
		"<think>I need to call two functions</think><|tool_calls_section_begin|>" +
			`<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>` +
			`<|tool_call_begin|>functions.search:1<|tool_call_argument_begin|>{"query": "print('hey')\n\"x\""}<|tool_call_end|>` +
			"<|tool_calls_section_end|>",
		"<think>calls from inside reasoning<|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{\"query\": \"q\"}",
		"text <|tool_call_begin|>functions.unknown:0<|tool_call_argument_begin|>{}<|tool_call_end|>",
		"<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": bad}<|tool_call_end|>",
		"<think>\n  \n</think>just content",
	},
	FormatDeepSeekV3: {
		"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"XYZCITY\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		"REASONING</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Tokyo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		"REASONING</think>CONTENT<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": \"Paris\"}<｜tool▁call▁end｜>" +
			"<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		"REASONING</think>\nCONTENT",
		"CONTENT",
		"  leading space</think>  and content",
		"r</think>c<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜> {\"city\": \"P\\u00e9\"} <｜tool▁call▁end｜> trailing",
		"r</think>c<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>nope<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
	},
	FormatDeepSeekR1: {
		"I'm\nthinking</think>Hello, world!\nWhat's up?",
		"r</think>c<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>" +
			"<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{\"query\": \"x\"}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		"r</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"P\"}<｜tool▁call▁end｜>",
		"r</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"P\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
	},
	FormatQwen3: {
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
		"Hello, world!\nWhat's up?<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>",
		"<think>\nI'm\nthinking\n</think>\n\nHello, world!\nWhat's up?",
		"<think>r</think>c<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n" +
			"<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\", \"filters\": {\"a\": [1, 2.5e3, null, true]}}}\n</tool_call>",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}, {\"name\": \"search\", \"arguments\": {}}\n</tool_call>",
		"hi <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call> trailing",
		"hi <tool_call>\n{\"name\": \"other\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		"hi <tool_call>\n{\"arguments\": {}, \"name\": \"search\"}\n</tool_call>",
		"  <think>unclosed reasoning",
		"Ünïcödé ✓ <tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"日本\"}}</tool_call>",
	},
	FormatQwen35: {
		"I'm\nthinking\n</think>\n\nHello, world!\nWhat's up?",
		"r</think>\n\nLet me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n" +
			"</function>\n</tool_call>\n<tool_call>\n<function=edit_file>\n<parameter=edits>\n[]\n</parameter>\n<parameter=path>\np\n</parameter>\n" +
			"<parameter=line>\n7\n</parameter>\n</function>\n</tool_call>",
		"calling straight from reasoning<tool_call>\n<function=search>\n<parameter=query>\nq\n</parameter>\n</function>\n</tool_call>",
		"r</think>no opener here\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
		"\n\n</think>\n\n<think>again</think> c",
		"r</think>c<tool_call>\n<function=get_weather>\n<parameter=city>\nP\n</parameter>\n</function>\n</tool_call>junk",
	},
	FormatQwen3Coder: {
		"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
		"  Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York, NY\n</parameter>\n" +
			"<parameter=days>\n3\n</parameter>\n<parameter=units>\nf\n</parameter>\n</function>\n</tool_call>",
		"<tool_call>\n<function=search>\n<parameter=query>\nprint(\"hi\")\n\tand \\ back\x01slash\n\n</parameter>\n" +
			"<parameter=filters>\n{\"lang\": [\"go\", \"c\"],\n \"n\": {\"x\": null}}\n</parameter>\n<parameter=limit>\n-2.5e3\n</parameter>\n" +
			"<parameter=safe>\ntrue\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n" +
			"</function>\n</tool_call>\n",
		"<tool_call>\n<function=edit_file>\n<parameter=line>\nnull\n</parameter>\n<parameter=edits>\n[{\"old\": \"a\", \"new\": \"b\"}, []]\n</parameter>\n" +
			"<parameter=path>\n/tmp/x.go\n</parameter>\n<parameter=mode>\nappend\n</parameter>\n<parameter=dry_run>\nfalse\n</parameter>\n" +
			"<parameter=mode>\n\n</parameter>\n</function>\n</tool_call>",
		"Sure.\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n</function>\n</tool_call>",
		"<tool_call>\n<function=edit_file>\n<parameter=path>\nx\n</parameter>\n</function>\n</tool_call>",
		"hi <tool_call>\n<function=other>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>",
		"<tool_call>\n<function=get_weather>\n<parameter=city>\nP\n</parameter>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>",
		"a <tool_call>\n<function=get_weather>\n<parameter=days>\n 2\n</parameter>\n<parameter=city>\nP\n</parameter>\n</function>\n</tool_call> trailing <tool_call>",
		"#include <functional>\n<function=search is not a call <tool_call> nor this",
		"Ünïcödé ✓ <tool_call>\n<function=search>\n<parameter=query>\n日本 \"quoted\" </parameter>\n</parameter>\n</function>\n</tool_call>",
		"<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function></tool_call>",
		"<think>\nhmm\n</think>\n\nx<tool_call>\n<function=get_weather>\n<parameter=city>\n\nP\n\n</parameter>\n<parameter=days>\n1\n</parameter>\n" +
			"<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
	},
}

func replyPrefixes(text string) []string {
	var out []string
	for i := 0; i <= len(text); i++ {
		if i == len(text) || utf8.RuneStart(text[i]) {
			out = append(out, text[:i])
		}
	}
	return out
}

// TestLlamaFormatsParseParity parses every reply, and every prefix of it as
// a partial reply, with k3 and with llama.cpp's common_chat_parse for the
// template k3 synth writes, with reasoning_format deepseek and none, and
// requires the same reasoning, content and calls (names, arguments, and
// the ids the format writes), or both failing (a failed partial parse is
// an empty message in llama.cpp, which llama-server skips).
func TestLlamaFormatsParseParity(t *testing.T) {
	tools := llamaTestTools
	for _, ft := range llamaFormatTemplates() {
		for _, rf := range []string{"deepseek", "none"} {
			t.Run(ft.name+"/reasoning_format="+rf, func(t *testing.T) {
				o := parseOptionsFor(t, ft, tools)
				o.ReasoningNone = rf == "none"
				type job struct {
					text    string
					partial bool
				}
				var jobs []job
				var reqs []any
				for _, reply := range formatReplies[ft.format] {
					for _, p := range replyPrefixes(reply) {
						jobs = append(jobs, job{p, p != reply})
					}
				}
				for _, j := range jobs {
					req := map[string]any{"text": j.text, "tools": openAITools(tools), "partial": j.partial, "reasoning_format": rf}
					if ft.kwargs != nil {
						req["kwargs"] = ft.kwargs
					}
					reqs = append(reqs, req)
				}
				_, parses := llamaRef(t, map[string]any{"template": ft.src, "parses": reqs})
				if len(parses) != len(jobs) {
					t.Fatalf("llama.cpp answered %d parses, sent %d", len(parses), len(jobs))
				}
				root := o.Format.impl().newParser(o).(*pegParser)
				agree, calls := 0, 0
				for i, j := range jobs {
					r := parses[i]
					got, ok := root.parse(j.text)
					var want Parsed
					if r["error"] == nil {
						want = Parsed{Reasoning: r["reasoning_content"].(string), Content: r["content"].(string)}
						for _, x := range r["tool_calls"].([]any) {
							tc := x.(map[string]any)
							want.ToolCalls = append(want.ToolCalls, ToolCall{ID: tc["id"].(string), Type: "function",
								Function: FunctionCall{Name: tc["name"].(string), Arguments: tc["arguments"].(string)}})
						}
					}
					if !ok && r["error"] == nil && !emptyParsed(want) {
						t.Errorf("%q (partial %v): k3 fails, llama.cpp gives %+v", j.text, j.partial, want)
						continue
					}
					if ok && r["error"] != nil && !emptyParsed(got) {
						t.Errorf("%q: llama.cpp fails (%v), k3 gives %+v", j.text, r["error"], got)
						continue
					}
					if diff := cmp.Diff(want, got, cmpEmpty); ok && r["error"] == nil && diff != "" {
						t.Errorf("%q (partial %v): k3 differs from llama.cpp (-llama +k3):\n%s", j.text, j.partial, diff)
						continue
					}
					agree++
					calls += len(want.ToolCalls)
				}
				if calls == 0 {
					t.Errorf("no reply parsed into a tool call")
				}
				t.Logf("%d/%d replies and prefixes parsed as llama.cpp parses them (%d calls)", agree, len(jobs), calls)
			})
		}
	}
}

func emptyParsed(p Parsed) bool { return p.Reasoning == "" && p.Content == "" && len(p.ToolCalls) == 0 }

// TestLlamaFormatsStreaming feeds every reply byte by byte, and in two
// pieces split everywhere: the deltas never take anything back (they add
// up to the result at every step), and the streamed reply equals the
// whole-text parse.
func TestLlamaFormatsStreaming(t *testing.T) {
	tools := llamaTestTools
	n := 0
	for _, ft := range llamaFormatTemplates() {
		o := parseOptionsFor(t, ft, tools)
		o.NewID = func() string { return "id" }
		for _, reply := range formatReplies[ft.format] {
			whole := Parse(reply, o)
			for i := 0; i <= len(reply); i++ {
				checkStream(t, reply, []string{reply[:i], reply[i:]}, o, whole)
			}
			var bytes []string
			for i := range len(reply) {
				bytes = append(bytes, reply[i:i+1])
			}
			checkStreamSteps(t, bytes, o)
			checkStream(t, reply, bytes, o, whole)
			n++
		}
	}
	t.Logf("%d replies", n)
}

// checkStreamSteps: after every chunk, the deltas so far add up to Result.
func checkStreamSteps(t *testing.T, chunks []string, o ParseOptions) {
	t.Helper()
	p := NewParser(o)
	var got Parsed
	for i, ch := range chunks {
		collect(p.Feed(ch), &got)
		if diff := cmp.Diff(p.Result(), got, cmpEmpty); diff != "" {
			t.Fatalf("after %q: deltas differ from Result (-result +deltas):\n%s", strings.Join(chunks[:i+1], ""), diff)
		}
	}
	collect(p.Close(), &got)
	if diff := cmp.Diff(p.Result(), got, cmpEmpty); diff != "" {
		t.Fatalf("after Close: deltas differ from Result (-result +deltas):\n%s", diff)
	}
}

// formatCalls are, per format, what follows ForcedCall(o, "get_weather")
// and ForcedCall(o, ""), and what follows the lazy grammar's trigger, in
// replies the grammar must take; each parses back into the calls.
var formatCalls = map[Format]struct{ named, any, afterTrigger, beforeTrigger string }{
	FormatKimiK2: {
		named: `{"city":"Oslo"}<|tool_call_end|><|tool_calls_section_end|>`,
		any: `search:0<|tool_call_argument_begin|>{}<|tool_call_end|>` +
			`<|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>{"city":"Oslo"}<|tool_call_end|><|tool_calls_section_end|>`,
		beforeTrigger: "Let me look.<|tool_calls_section_begin|>",
		afterTrigger:  `functions.get_weather:0<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|><|tool_calls_section_end|>`,
	},
	FormatDeepSeekV3: {
		named:         `{"city": "Oslo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`,
		any:           `search<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city":"Oslo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`,
		beforeTrigger: "Let me look.",
		afterTrigger:  `<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city":"Oslo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`,
	},
	FormatDeepSeekR1: {
		named:         "{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		any:           "search\n```json\n{}```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
		beforeTrigger: "Let me look.",
		afterTrigger:  "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\":\"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
	},
	FormatQwen35: {
		named:         "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
		any:           "search>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
		beforeTrigger: "Let me look.\n",
		afterTrigger:  "\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
	},
	FormatQwen3Coder: {
		named:         "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
		any:           "search>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
		beforeTrigger: "Let me look.\n",
		afterTrigger:  "\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
	},
	FormatQwen3: {
		named:         "{\"city\": \"Oslo\"}}\n</tool_call>",
		any:           "search\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
		beforeTrigger: "Let me look.\n",
		afterTrigger:  "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>",
	},
}

// TestLlamaFormatsGrammar: for each format, the forced-call text and the
// grammars of tool_choice required, a named function, auto (with
// llama.cpp's trigger for the template) and response_format take the
// replies they should and refuse arguments outside the schema, and what
// they take parses back into the calls.
func TestLlamaFormatsGrammar(t *testing.T) {
	weather := Tool{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`)}
	search := Tool{Name: "search"}
	tools := []Tool{weather, search}
	schema := []byte(`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`)
	for _, ft := range llamaFormatTemplates() {
		t.Run(ft.name, func(t *testing.T) {
			o := parseOptionsFor(t, ft, tools)
			fc := formatCalls[ft.format]
			// llama.cpp's lazy triggers for this template (its dump through
			// chatref, checked below); k3's is the first (format_qwen3coder.go)
			llamaTriggers := map[Format][]string{FormatKimiK2: {k2CallBegin}, FormatDeepSeekV3: {dsCallsBegin}, FormatDeepSeekR1: {dsCallsBegin},
				FormatQwen3: {hermesCallOpen}, FormatQwen3Coder: {"<tool_call>", "<function=get_weather>", "<function=search>"},
				FormatQwen35: {"<tool_call>"}}[ft.format]
			llamaTrigger := llamaTriggers[0]
			t.Run("llama.cpp trigger", func(t *testing.T) {
				req := map[string]any{"text": "", "tools": openAITools(tools), "dump": true}
				if ft.kwargs != nil {
					req["kwargs"] = ft.kwargs
				}
				_, parses := llamaRef(t, map[string]any{"template": ft.src, "parses": []any{req}})
				trs, _ := parses[0]["triggers"].([]any)
				var got []string
				for _, tr := range trs {
					got = append(got, tr.(map[string]any)["value"].(string))
				}
				if !cmp.Equal(got, llamaTriggers) || parses[0]["grammar_lazy"] != true {
					t.Errorf("llama.cpp's triggers %q (lazy %v), want %q", got, parses[0]["grammar_lazy"], llamaTriggers)
				}
			})

			check := func(name string, c Constraint, wantTrigger, yes, no string, wantCalls []string) {
				t.Helper()
				src, trigger, err := ReplyGrammar(o, c)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if trigger != wantTrigger {
					t.Errorf("%s: trigger %q, want %q", name, trigger, wantTrigger)
				}
				if !matchesReply(t, src, "", yes) {
					t.Errorf("%s: %q does not match\n%s", name, yes, src)
				}
				if no != "" && matchesReply(t, src, "", no) {
					t.Errorf("%s: %q matches", name, no)
				}
				if wantCalls == nil {
					return
				}
				var reply string
				switch {
				case c.Force:
					reply = ForcedCall(o, c.ForceName) + yes
				default:
					reply = closeThink(o) + fc.beforeTrigger + trigger + yes
				}
				p := Parse(reply, o)
				var got []string
				for _, tc := range p.ToolCalls {
					got = append(got, tc.Function.Name)
				}
				if !cmp.Equal(got, wantCalls) || p.Reasoning != "" {
					t.Errorf("%s: %q parses as %+v, want calls %v", name, reply, p, wantCalls)
				}
			}
			check("named", Constraint{Tools: true, Force: true, ForceName: "get_weather"}, "",
				fc.named, strings.Replace(fc.named, "city", "town", 1), []string{"get_weather"})
			check("required", Constraint{Tools: true, Force: true}, "",
				fc.any, "nope"+fc.any[len("search"):], []string{"search", "get_weather"})
			if strings.HasPrefix(fc.any, "get_weather") {
				t.Fatal("fixture")
			}
			check("auto", Constraint{Tools: true}, llamaTrigger,
				fc.afterTrigger, strings.Replace(fc.afterTrigger, "city", "town", 1), []string{"get_weather"})
			reasoning := ""
			if o.Thinking {
				reasoning = "hmm" + thinkClose
			}
			check("response_format", Constraint{Content: schema}, "", reasoning+`{"a": 1}`, reasoning+`{"a": "x"}`, nil)
			check("response_format in a block", Constraint{Content: schema}, "", reasoning+"```json\n{\"a\": 1}\n```", "", nil)
			check("response_format or a call", Constraint{Content: schema, Tools: true}, "",
				reasoning+fc.beforeTrigger[:0]+llamaTrigger+fc.afterTrigger, reasoning+`{"b": 1}`, nil)
		})
	}
}

// BenchmarkLlamaFormatStream streams a 27 kB Qwen3 reply (long reasoning,
// content, one long call) in 4-byte chunks: llama.cpp's way of streaming
// parses the whole text after every chunk, so this is the quadratic case.
func BenchmarkLlamaFormatStream(b *testing.B) {
	o := ParseOptions{Format: FormatQwen3, Tools: []Tool{weatherTool, searchTool}}
	reply := "<think>" + strings.Repeat("thinking about it ", 1000) + "</think>" + strings.Repeat("content words ", 500) +
		"<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"" + strings.Repeat("q", 2000) + "\"}}</tool_call>"
	b.SetBytes(int64(len(reply)))
	for b.Loop() {
		p := NewParser(o)
		for i := 0; i < len(reply); i += 4 {
			p.Feed(reply[i:min(i+4, len(reply))])
		}
		p.Close()
		if len(p.Result().ToolCalls) != 1 {
			b.Fatal("no call")
		}
	}
}

// TestLlamaFormatsGolden holds the fixtures of llama.cpp's
// tests/test-chat.cpp for these formats to the messages that test expects
// (its special_function tool renamed to a declared one; arguments as
// written, as common_chat_parse returns them), without the reference.
func TestLlamaFormatsGolden(t *testing.T) {
	tools := []Tool{weatherTool, searchTool}
	call := func(id, name, args string) ToolCall {
		return ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: name, Arguments: args}}
	}
	for _, tc := range []struct {
		name    string
		ft      int // index in llamaFormatTemplates
		text    string
		want    Parsed
		noTools bool
	}{
		{name: "kimi-k2/content", ft: 0, text: "Hello, world!\nWhat's up?", want: Parsed{Content: "Hello, world!\nWhat's up?"}},
		{name: "kimi-k2/call with reasoning", ft: 0, text: formatReplies[FormatKimiK2][2],
			want: Parsed{Reasoning: "I'm thinking about this", ToolCalls: []ToolCall{call("functions.get_weather:0", "get_weather", `{"city": "Paris"}`)}}},
		{name: "kimi-k2/content and call", ft: 0, text: formatReplies[FormatKimiK2][3],
			want: Parsed{Content: "Hello, world!\nWhat's up?", ToolCalls: []ToolCall{call("functions.get_weather:0", "get_weather", `{"city": "Paris", "days": 3}`)}}},
		{name: "kimi-k2/parallel calls", ft: 0, text: formatReplies[FormatKimiK2][4],
			want: Parsed{Reasoning: "I need to call two functions", ToolCalls: []ToolCall{
				call("functions.get_weather:0", "get_weather", `{"city": "Paris"}`),
				call("functions.search:1", "search", `{"query": "print('hey')\n\"x\""}`)}}},
		{name: "deepseek-v3/call, thinking off", ft: 2, text: formatReplies[FormatDeepSeekV3][0],
			want: Parsed{ToolCalls: []ToolCall{call("id", "get_weather", `{"city": "XYZCITY"}`)}}},
		{name: "deepseek-v3/reasoning and call", ft: 1, text: formatReplies[FormatDeepSeekV3][1],
			want: Parsed{Reasoning: "REASONING", ToolCalls: []ToolCall{call("id", "get_weather", `{"city": "Tokyo"}`)}}},
		{name: "deepseek-v3/reasoning, content, two calls", ft: 1, text: formatReplies[FormatDeepSeekV3][2],
			want: Parsed{Reasoning: "REASONING", Content: "CONTENT", ToolCalls: []ToolCall{
				call("id", "search", `{"query": "Paris"}`), call("id", "get_weather", `{"city": "Paris"}`)}}},
		// test-chat.cpp writes this one's expectation as reasoning
		// "REASONING\n", content "CONTENT"; the reference release's
		// common_chat_parse (chatref) returns the newline with the content.
		{name: "deepseek-v3/newline after reasoning", ft: 1, text: "REASONING</think>\nCONTENT",
			want: Parsed{Reasoning: "REASONING", Content: "\nCONTENT"}},
		{name: "deepseek-v3/thinking off", ft: 2, text: "CONTENT", want: Parsed{Content: "CONTENT"}},
		{name: "hermes/call", ft: 3, text: formatReplies[FormatQwen3][0],
			want: Parsed{ToolCalls: []ToolCall{call("id", "get_weather", `{"city": "Paris"}`)}}},
		{name: "hermes/content and call", ft: 3, text: formatReplies[FormatQwen3][1],
			want: Parsed{Content: "Hello, world!\nWhat's up?", ToolCalls: []ToolCall{call("id", "get_weather", `{"city": "Paris"}`)}}},
		{name: "qwen3/thoughts", ft: 3, text: "<think>I'm\nthinking</think>Hello, world!\nWhat's up?", noTools: true,
			want: Parsed{Reasoning: "I'm\nthinking", Content: "Hello, world!\nWhat's up?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := llamaFormatTemplates()[tc.ft]
			ts := tools
			if tc.noTools {
				ts = nil
			}
			o := parseOptionsFor(t, ft, ts)
			o.NewID = func() string { return "id" }
			if diff := cmp.Diff(tc.want, Parse(tc.text, o), cmpEmpty); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestDetectFormat: each family's template gets its format, and layouts
// k3 does not parse get content only.
func TestDetectFormat(t *testing.T) {
	kimiK3Template := kimiK3
	for _, tc := range []struct {
		name, src string
		want      Format
	}{
		{"kimi-k3", kimiK3Template(t).Source(), FormatKimiK3},
		{"kimi-k2", synth.KimiK2Template, FormatKimiK2},
		{"deepseek-v3", synth.DeepSeekV3Template, FormatDeepSeekV3},
		{"qwen3", synth.Qwen3ChatTemplate, FormatQwen3},
		{"hermes 2 pro", "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<tool_call>\n{% endfor %}", FormatHermes},
		{"qwen3-coder", synth.Qwen3CoderChatTemplate, FormatQwen3Coder},
		{"qwen3-coder layout with think", "<think><tool_call>\n<function={{ name }}>\n<parameter=x>", FormatQwen35},
		{"function without parameter", "<think><tool_call>\n<function={{ name }}>", FormatContent},
		{"deepseek-r1", llamaFormatTemplates()[5].src, FormatDeepSeekR1},
		{"plain", "{% for m in messages %}{{ m.content }}{% endfor %}", FormatContent},
	} {
		if got := DetectFormat(tc.src); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLlamaFormatsDeepArguments: arguments nested past maxJSONDepth stop
// the call from parsing (the stream keeps what came before) instead of
// exhausting the stack.
func TestLlamaFormatsDeepArguments(t *testing.T) {
	o := ParseOptions{Format: FormatQwen3, Tools: []Tool{searchTool}}
	text := "hi <tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": " + strings.Repeat("[", 100000)
	got := Parse(text, o)
	if got.Content != "hi " {
		t.Errorf("content %q", got.Content)
	}
	shallow := Parse("<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": "+strings.Repeat("[", 200)+strings.Repeat("]", 200)+"}}</tool_call>", o)
	if len(shallow.ToolCalls) != 1 {
		t.Errorf("200 levels: %+v", shallow)
	}
}
