package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/k3-inference/k3/core/server"
)

// nestedSchema has objects in objects, arrays of objects, enums, consts,
// optional and nullable fields, integer ranges and a $ref; its strings
// and arrays are bounded so that a random model's replies end.
const nestedSchema = `{
  "$defs": {"tag": {"type": "object", "properties": {"label": {"type": "string", "maxLength": 6}, "weight": {"type": "integer", "minimum": -5, "maximum": 5}}, "required": ["label"], "additionalProperties": false}},
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 10},
    "kind": {"enum": ["cat", "dog", 7, null]},
    "version": {"const": 2},
    "owner": {"type": "object", "properties": {
      "id": {"type": "integer", "minimum": 0, "maximum": 999},
      "email": {"type": ["string", "null"], "maxLength": 12},
      "active": {"type": "boolean"}
    }, "required": ["id", "active"], "additionalProperties": false},
    "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "minItems": 1, "maxItems": 3},
    "score": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 100}, {"type": "null"}]}
  },
  "required": ["name", "kind", "version", "owner", "tags"],
  "additionalProperties": false
}`

func compileSchema(t *testing.T, schema string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("mem:///s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem:///s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validate(s *jsonschema.Schema, doc string) error {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(inst)
}

// TestResponseFormatJSONSchema: 50 replies of the random model under a
// nested json_schema all validate (checked by a JSON Schema validator).
func TestResponseFormatJSONSchema(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	val := compileSchema(t, nestedSchema)
	for seed := range 50 {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"Describe a pet as JSON."}],"seed":%d,"temperature":1,"max_tokens":1500,
			"chat_template_kwargs":{"thinking":false},
			"response_format":{"type":"json_schema","json_schema":{"name":"pet","strict":true,"schema":%s}}}`, seed, nestedSchema)
		code, _, b := ts.do(t, "POST", "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("seed %d: status %d: %s", seed, code, b)
		}
		got, _ := wholeReply(t, b)
		if got.Finish != "stop" {
			t.Fatalf("seed %d: finish %q, want stop (the grammar ended the reply): %s", seed, got.Finish, b)
		}
		if err := validate(val, got.Content); err != nil {
			t.Fatalf("seed %d: reply %q does not validate: %v", seed, got.Content, err)
		}
	}
}

func TestResponseFormatJSONObjectAndStream(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	for seed := range 3 {
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"JSON please"}],"seed":%d,"max_tokens":600,"chat_template_kwargs":{"thinking":false},"response_format":{"type":"json_object"}`, seed)
		whole := postChat(t, ts.URL, body+"}")
		var obj map[string]any
		if whole.Finish == "stop" {
			if err := json.Unmarshal([]byte(whole.Content), &obj); err != nil {
				t.Fatalf("json_object reply %q is not an object: %v", whole.Content, err)
			}
		} else if !strings.HasPrefix(strings.TrimSpace(whole.Content), "{") {
			t.Fatalf("json_object reply %q (cut at the limit) does not start an object", whole.Content)
		}
		streamed, _ := streamReply(t, postStream(t, ts.URL+"/v1/chat/completions", body+`,"stream":true}`), false)
		if streamed.Content != whole.Content {
			t.Errorf("streamed %q, whole %q", streamed.Content, whole.Content)
		}
	}
}

// TestToolArgumentsFollowSchema: forced tool calls of the random model
// carry arguments that validate against the tool's parameters.
func TestToolArgumentsFollowSchema(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	params := `{"type":"object","properties":{"city":{"type":"string","maxLength":8},"days":{"type":"integer","minimum":1,"maximum":14},"units":{"enum":["C","F"]}},"required":["city","days"],"additionalProperties":false}`
	other := `{"type":"object","properties":{"q":{"type":"string","maxLength":5}},"required":["q"],"additionalProperties":false}`
	vals := map[string]*jsonschema.Schema{"get_weather": compileSchema(t, params), "search": compileSchema(t, other)}
	tools := fmt.Sprintf(`"tools":[{"type":"function","function":{"name":"get_weather","parameters":%s}},{"type":"function","function":{"name":"search","parameters":%s}}]`, params, other)
	for seed := range 6 {
		choice := `"required"`
		if seed%2 == 0 {
			choice = `{"type":"function","function":{"name":"get_weather"}}`
		}
		body := fmt.Sprintf(`{"messages":[{"role":"user","content":"Weather?"}],%s,"tool_choice":%s,"seed":%d,"temperature":1,"max_tokens":1200}`, tools, choice, seed)
		code, _, b := ts.do(t, "POST", "/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("status %d: %s", code, b)
		}
		_, r := wholeReply(t, b)
		calls := r.Choices[0].Message.ToolCalls
		if len(calls) == 0 || *r.Choices[0].FinishReason != "tool_calls" {
			t.Fatalf("seed %d: no tool call: %s", seed, b)
		}
		for _, c := range calls {
			val, ok := vals[c.Function.Name]
			if !ok || (seed%2 == 0 && c.Function.Name != "get_weather") {
				t.Fatalf("seed %d: call of %q", seed, c.Function.Name)
			}
			if err := validate(val, c.Function.Arguments); err != nil {
				t.Fatalf("seed %d: %s arguments %s do not validate: %v", seed, c.Function.Name, c.Function.Arguments, err)
			}
		}
	}
}

func TestConstraintErrors(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"strng"}}}}`, `unknown type \"strng\"`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a"}}}`, `json_schema.schema is required`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}`, `response_format.type must be`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"not":{}}}}}}]}`, `tool \"f\" parameters: json schema at /properties/a: \"not\" is not supported`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"grammar":"root ::= foo"}`, `rule \"foo\" is used but not defined`},
		{"/v1/completions", `{"prompt":"x","grammar":"root ::= \"a"}`, `unterminated string literal`},
		{"/v1/completions", `{"prompt":"x","json_schema":{"type":"object"},"grammar":"root ::= \"a\""}`, `Cannot use both`},
		{"/completion", `{"prompt":"x","json_schema":{"$ref":"#/nope"}}`, `\"nope\" not found`},
		{"/v1/responses", `{"input":"x","text":{"format":{"type":"json_schema","name":"n","schema":{"type":"array","minItems":2,"maxItems":1}}}}`, `maxItems 1 is below minItems 2`},
	} {
		code, _, b := ts.do(t, "POST", tc.path, tc.body)
		if code != 400 || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s %s: %d %s, want 400 naming %s", tc.path, tc.body, code, b, tc.want)
		}
	}
}

// TestTextGrammar: llama-server's grammar and json_schema on the
// completion routes hold the raw text.
func TestTextGrammar(t *testing.T) {
	ts := newTestServer(t, server.Options{})
	for _, tc := range []struct{ path, field string }{
		{"/v1/completions", `"grammar":"root ::= (\"yes\" | \"no\") \" \" [0-9]{2,3} \".\""`},
		{"/completion", `"grammar":"root ::= (\"yes\" | \"no\") \" \" [0-9]{2,3} \".\""`},
		{"/v1/completions", `"json_schema":{"type":"object","properties":{"n":{"type":"integer","minimum":3,"maximum":9}},"required":["n"],"additionalProperties":false}`},
	} {
		for seed := range 4 {
			body := fmt.Sprintf(`{"prompt":"Answer:","seed":%d,"temperature":1,"max_tokens":200,%s}`, seed, tc.field)
			code, _, b := ts.do(t, "POST", tc.path, body)
			if code != 200 {
				t.Fatalf("%s: %d %s", tc.path, code, b)
			}
			var r struct {
				Content string `json:"content"`
				Choices []struct {
					Text string `json:"text"`
				} `json:"choices"`
			}
			_ = json.Unmarshal(b, &r)
			text := r.Content
			if len(r.Choices) > 0 {
				text = r.Choices[0].Text
			}
			ok := false
			if strings.Contains(tc.field, "json_schema") {
				var v struct{ N int }
				ok = json.Unmarshal([]byte(text), &v) == nil && v.N >= 3 && v.N <= 9
			} else {
				var word string
				var n int
				_, err := fmt.Sscanf(text, "%s %d.", &word, &n)
				ok = err == nil && (word == "yes" || word == "no") && n >= 0 && n <= 999 && strings.HasSuffix(text, ".")
			}
			if !ok {
				t.Errorf("%s %s seed %d: %q does not follow the grammar", tc.path, tc.field, seed, text)
			}
		}
	}
}
