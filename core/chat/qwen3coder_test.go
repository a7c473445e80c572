package chat

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/synth"
)

// editTool has three required parameters (taken in any order), one of
// them an array of $ref objects and one integer-or-null, and optional ones:
// a string through a $ref to an enum, and a boolean.
var editTool = Tool{
	Name:        "edit_file",
	Description: "Edit a file.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},` +
		`"edits":{"type":"array","items":{"$ref":"#/$defs/edit"}},"line":{"type":["integer","null"]},` +
		`"mode":{"$ref":"#/$defs/mode"},"dry_run":{"type":"boolean"}},"required":["path","edits","line"],` +
		`"$defs":{"edit":{"type":"object","properties":{"old":{"type":"string"},"new":{"type":"string"}}},` +
		`"mode":{"enum":["append","replace"]}}}`),
}

// TestQwen3CoderLlamaRenderParity renders every conversation with
// Qwen3-Coder's template (the one k3 synth writes for its preset) with k3
// and with llama.cpp: tool declarations and calls whose arguments are
// written one <parameter=KEY> each.
func TestQwen3CoderLlamaRenderParity(t *testing.T) {
	llamaRenderParity(t, synth.Qwen3CoderChatTemplate, append(conversations(), xmlConversations()...), xmlRenderDiffers)
}

// TestQwen35LlamaRenderParity does the same with Qwen3.5's template (the
// same calls, with <think> reasoning).
func TestQwen35LlamaRenderParity(t *testing.T) {
	src, err := os.ReadFile("testdata/qwen3.5.jinja")
	if err != nil {
		t.Fatal(err)
	}
	llamaRenderParity(t, string(src), append(conversations(), xmlConversations()...), xmlRenderDiffers)
}

// xmlRenderDiffers are the conversations k3 renders differently with these
// templates, and why.
var xmlRenderDiffers = map[string]string{
	"argument_types": "the template prints a null argument with |string: llama.cpp's engine (like Python's) " +
		`writes "None", github.com/ardanlabs/jinja v1.8.0 writes ""`,
}

// xmlConversations declare a tool whose schema has $defs, a type list and
// an enum (printed in the tool list), and call it with every kind of
// argument but null.
func xmlConversations() []conversation {
	return []conversation{
		{name: "xml_schema_and_calls", in: Input{
			Messages: []Message{
				{Role: "system", Content: "You edit files."},
				{Role: "user", Content: "Fix x.go, then check the weather."},
				{Role: "assistant", Content: "  Editing.  ", ToolCalls: []ToolCall{
					call("e1", "edit_file", `{"path":"x.go","edits":[{"old":"a","new":"b
c"}],"line":7,"mode":"append","dry_run":true}`),
					call("w1", "get_weather", `{"city":"Zürich","days":2.5}`),
				}},
				{Role: "tool", ToolCallID: "e1", Content: "ok"},
				{Role: "tool", ToolCallID: "w1", Content: "sunny"},
				{Role: "assistant", Content: "Done."},
				{Role: "user", Content: "Thanks"},
			},
			Tools:               []Tool{editTool, weatherTool, {Name: "bare"}},
			AddGenerationPrompt: true,
		}},
	}
}

// TestQwen3CoderGolden holds the fixtures of llama.cpp's tests/test-chat.cpp
// for Qwen3-Coder to the calls that test expects (arguments as
// common_chat_parse writes them), without the reference.
func TestQwen3CoderGolden(t *testing.T) {
	o := ParseOptions{Format: FormatQwen3Coder, NewID: func() string { return "id" }, Tools: []Tool{
		{Name: "special_function", Parameters: json.RawMessage(`{"type":"object","properties":{"arg1":{"type":"integer"}},"required":["arg1"]}`)},
		{Name: "special_function_with_opt", Parameters: json.RawMessage(`{"type":"object","properties":{"arg1":{"type":"integer"},"arg2":{"type":"integer"}},"required":["arg1"]}`)},
		{Name: "python", Parameters: json.RawMessage(`{"type":"object","properties":{"code":{"type":"string"}},"required":["code"]}`)},
		{Name: "todo_list", Parameters: json.RawMessage(`{"type":"object","properties":{"todos":{"type":"array","items":{"type":"object"}}},"required":["todos"]}`)},
		{Name: "edit", Parameters: json.RawMessage(`{"type":"object","properties":{"filename":{"type":"string"},"oldString":{"type":"string"},"newString":{"type":"string"}},"required":["filename","oldString","newString"]}`)},
	}}
	call := func(name, args string) ToolCall {
		return ToolCall{ID: "id", Type: "function", Function: FunctionCall{Name: name, Arguments: args}}
	}
	const special = "<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>"
	for _, tc := range []struct {
		name, text string
		want       Parsed
	}{
		{"content", "Hello, world!\nWhat's up?", Parsed{Content: "Hello, world!\nWhat's up?"}},
		{"call", "<tool_call>\n" + special, Parsed{ToolCalls: []ToolCall{call("special_function", `{"arg1":1}`)}}},
		{"first <tool_call> left out", special, Parsed{ToolCalls: []ToolCall{call("special_function", `{"arg1":1}`)}}},
		{"content, first <tool_call> left out", "Let me call it.\n" + special,
			Parsed{Content: "Let me call it.\n", ToolCalls: []ToolCall{call("special_function", `{"arg1":1}`)}}},
		{"two calls", special + "\n<tool_call>\n<function=special_function_with_opt>\n<parameter=arg1>\n1\n</parameter>\n" +
			"<parameter=arg2>\n2\n</parameter>\n</function>\n</tool_call>",
			Parsed{ToolCalls: []ToolCall{call("special_function", `{"arg1":1}`), call("special_function_with_opt", `{"arg1":1,"arg2":2}`)}}},
		{"code", "<tool_call>\n<function=python>\n<parameter=code>\ndef hello():\n    print(\"Hello, world!\")\n\nhello()\n</parameter>\n</function>\n</tool_call>",
			Parsed{ToolCalls: []ToolCall{call("python", `{"code":"def hello():\n    print(\"Hello, world!\")\n\nhello()"}`)}}},
		{"array of objects", "<tool_call>\n<function=todo_list>\n<parameter=todos>\n" +
			`[{"item": "Check stuff", "selected": false}, {"item": "Prepare stuff", "selected": true}]` + "\n</parameter>\n</function>\n</tool_call>",
			Parsed{ToolCalls: []ToolCall{call("todo_list", `{"todos":[{"item": "Check stuff", "selected": false}, {"item": "Prepare stuff", "selected": true}]}`)}}},
		{"required in any order", "<tool_call>\n<function=edit>\n<parameter=newString>\n#include\n</parameter>\n" +
			"<parameter=filename>\nfoo.c\n</parameter>\n<parameter=oldString>\n#iclunde\n</parameter>\n</function>\n</tool_call>",
			Parsed{ToolCalls: []ToolCall{call("edit", `{"newString":"#include","filename":"foo.c","oldString":"#iclunde"}`)}}},
	} {
		if diff := cmp.Diff(tc.want, Parse(tc.text, o), cmpEmpty); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestXMLParams: a parameter is text when any branch of its schema allows
// a string (through $ref, anyOf, enum, format...), as llama.cpp decides it,
// and parameters keep the schema's order.
func TestXMLParams(t *testing.T) {
	got := xmlParams(Tool{Parameters: json.RawMessage(`{"type":"object","properties":{` +
		`"z":{"type":"integer"},"s":{"type":"string"},"ts":{"type":["null","string"]},"any":{"anyOf":[{"type":"integer"},{"type":"string"}]},` +
		`"ref":{"$ref":"#/$defs/s"},"loop":{"$ref":"#/$defs/loop"},"bad":{"$ref":"#/nowhere"},"e":{"enum":[1,"x"]},"c":{"const":"k"},` +
		`"d":{"format":"date-time"},"u":{"format":"uuid4"},"p":{"pattern":"^a"},"all":{"allOf":[{"type":"string"},{"maxLength":3}]},` +
		`"allmixed":{"allOf":[{"type":"string"},{"type":"integer"}]},"o":{"type":"object"},"none":{}},` +
		`"required":["s","z"],"$defs":{"s":{"type":"string"},"loop":{"$ref":"#/$defs/loop"}}}`)})
	var names, text, req []string
	for _, p := range got {
		names = append(names, p.name)
		if p.str {
			text = append(text, p.name)
		}
		if p.required {
			req = append(req, p.name)
		}
	}
	if want := "z s ts any ref loop bad e c d u p all allmixed o none"; strings.Join(names, " ") != want {
		t.Errorf("order %v, want %s", names, want)
	}
	if want := "s ts any ref e c d u p all"; strings.Join(text, " ") != want {
		t.Errorf("text parameters %v, want %s", text, want)
	}
	if want := "z s"; strings.Join(req, " ") != want {
		t.Errorf("required %v, want %s", req, want)
	}
	for _, bad := range []string{``, `null`, `[]`, `{"properties":[]}`, `{"type":"object"}`} {
		if p := xmlParams(Tool{Parameters: json.RawMessage(bad)}); p != nil {
			t.Errorf("%s: %v", bad, p)
		}
	}
}

// TestQwen3CoderGrammar: the grammar of a named call takes the required
// parameters in any order, then optional ones, each value of its schema
// (text up to the closing tag for a string, JSON else), and what it takes
// parses back into the call; a missing required parameter, a value outside
// its schema or an optional one first are refused.
func TestQwen3CoderGrammar(t *testing.T) {
	o := ParseOptions{Format: FormatQwen3Coder, Tools: []Tool{editTool, weatherTool}, NewID: func() string { return "id" }}
	src, trigger, err := ReplyGrammar(o, Constraint{Tools: true, Force: true, ForceName: "edit_file"})
	if err != nil || trigger != "" {
		t.Fatalf("%v, trigger %q", err, trigger)
	}
	arg := func(k, v string) string { return xmlParamOpen + k + ">\n" + v + xmlParamClose }
	const end = xmlFuncClose + xmlCallClose
	for _, tc := range []struct {
		args string
		ok   bool
		want string
	}{
		{arg("path", "a.go") + arg("edits", `[{"old": "x", "new": "y"}]`) + arg("line", "3"), true,
			`{"path":"a.go","edits":[{"old": "x", "new": "y"}],"line":3}`},
		{arg("line", "null") + arg("edits", "[]") + arg("path", "multi\nline </parameter> text") + arg("mode", "replace") +
			arg("dry_run", "false") + arg("mode", "append"), true,
			`{"line":null,"edits":[],"path":"multi\nline </parameter> text","mode":"replace","dry_run":false,"mode":"append"}`},
		{arg("path", "a.go") + arg("edits", "[]"), false, ""},
		{arg("mode", "append") + arg("path", "a.go") + arg("edits", "[]") + arg("line", "3"), false, ""},
		{arg("path", "a.go") + arg("edits", `[{"old": 1}]`) + arg("line", "3"), false, ""},
		{arg("path", "a.go") + arg("edits", "[]") + arg("line", `"3"`), false, ""},
		{arg("path", "a.go") + arg("edits", "[]") + arg("line", "3") + arg("dry_run", "yes"), false, ""},
	} {
		if got := matchesReply(t, src, "", tc.args+end); got != tc.ok {
			t.Errorf("%q: grammar takes it %v, want %v", tc.args, got, tc.ok)
		}
		if !tc.ok {
			continue
		}
		p := Parse(ForcedCall(o, "edit_file")+tc.args+end, o)
		if len(p.ToolCalls) != 1 || p.ToolCalls[0].Function.Arguments != tc.want {
			t.Errorf("%q parses as %+v, want %s", tc.args, p, tc.want)
		}
	}
	if _, _, err := ReplyGrammar(ParseOptions{Format: FormatQwen3Coder, Tools: []Tool{{Name: "f",
		Parameters: json.RawMessage(`{"properties":{"x":{"type":"integer","not":{}}}}`)}}}, Constraint{Tools: true}); err == nil ||
		!strings.Contains(err.Error(), `tool "f"`) || !strings.Contains(err.Error(), "/properties/x") {
		t.Errorf("unsupported schema: %v", err)
	}
}
