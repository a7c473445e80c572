package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/grammar"
)

func matchesReply(t *testing.T, src, prefix, reply string) bool {
	t.Helper()
	g, err := grammar.Parse(src, grammar.Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	m := grammar.NewMatcher(g, grammar.NewVocab(nil, nil))
	return m.AcceptString(reply) == nil && m.Done()
}

func TestReplyGrammar(t *testing.T) {
	schema := []byte(`{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`)
	weather := Tool{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`)}
	search := Tool{Name: `se"arch`}
	call := func(name, args string) string {
		return CallNamed(name) + `<|open|>json type="object"<|sep|>` + args + `<|close|>json<|sep|><|close|>call<|sep|>`
	}
	for _, tc := range []struct {
		name    string
		o       ParseOptions
		c       Constraint
		trigger string
		yes, no []string
	}{
		{"content", ParseOptions{}, Constraint{Content: schema}, "",
			[]string{`{"a": 1}`, `{"a":1}<|close|>response<|sep|>`, `{"a":1}<|close|>response<|sep|><|close|>message<|sep|>`},
			[]string{`{"a": "x"}`, `hi {"a":1}`, `{"a":1} `}},
		{"content after reasoning", ParseOptions{Thinking: true}, Constraint{Content: schema}, "",
			[]string{`I think <|close|>think too<|close|>think<|sep|><|open|>response<|sep|>{"a":2}`},
			[]string{`{"a":2}`, `x<|close|>think<|sep|>{"a":2}`, `x<|close|>think<|sep|>y<|close|>think<|sep|><|open|>response<|sep|>{"a":2}`}},
		{"content or tools", ParseOptions{Tools: []Tool{weather}}, Constraint{Content: schema, Tools: true}, "",
			[]string{`{"a":1}`, `<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="` + call("get_weather", `{"city":"x"}`) + `<|close|>tools<|sep|>`},
			[]string{`<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="` + call("get_weather", `{}`) + `<|close|>tools<|sep|>`}},
		{"forced named", ParseOptions{Tools: []Tool{weather, search}}, Constraint{Tools: true, Force: true, ForceName: "get_weather"}, "",
			[]string{`<|open|>json type="object"<|sep|>{"city":"Oslo"}<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>`},
			[]string{`<|open|>json type="object"<|sep|>{"town":"Oslo"}<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`}},
		{"forced any", ParseOptions{Tools: []Tool{weather, search}}, Constraint{Tools: true, Force: true}, "",
			[]string{call(`se"arch`, `{"q":[1]}`) + `<|open|>call tool="` + strings.Replace(call("get_weather", `{"city":""}`), `"1"`, `"2"`, 1) + `<|close|>tools<|sep|>`},
			[]string{call("nope", `{}`) + `<|close|>tools<|sep|>`}},
		{"auto", ParseOptions{Tools: []Tool{weather}}, Constraint{Tools: true}, `<|open|>call tool="`,
			[]string{call("get_weather", `{"city":"x"}`) + `<|close|>tools<|sep|>`},
			[]string{call("get_weather", `{"city":1}`) + `<|close|>tools<|sep|>`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, trigger, err := ReplyGrammar(tc.o, tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if trigger != tc.trigger {
				t.Errorf("trigger %q, want %q", trigger, tc.trigger)
			}
			for _, r := range tc.yes {
				if !matchesReply(t, src, "", r) {
					t.Errorf("%q does not match\n%s", r, src)
				}
			}
			for _, r := range tc.no {
				if matchesReply(t, src, "", r) {
					t.Errorf("%q matches", r)
				}
			}
		})
	}
	// What the grammar allows parses back into the call and its arguments.
	forced := ForcedCall(ParseOptions{Tools: []Tool{weather}}, "get_weather") +
		`<|open|>json type="object"<|sep|>{"city":"Oslo"}<|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>`
	p := Parse(forced, ParseOptions{Tools: []Tool{weather}})
	if len(p.ToolCalls) != 1 || p.ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` {
		t.Errorf("parsed %+v", p)
	}
	_, _, err := ReplyGrammar(ParseOptions{Tools: []Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"not":{}}}}`)}}}, Constraint{Tools: true})
	if err == nil || !strings.Contains(err.Error(), `tool "f" parameters`) {
		t.Errorf("bad tool schema: %v", err)
	}
}
