package chat

import (
	"encoding/json"
	"time"
)

// conversation is one rendering case shared by the golden and the parity
// tests.
type conversation struct {
	name string
	in   Input
	// wantErr: the template must refuse this input (raise_exception).
	wantErr bool
}

var fixedNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func kw(pairs ...string) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = json.RawMessage(pairs[i+1])
	}
	return m
}

var weatherTool = Tool{
	Name:        "get_weather",
	Description: "Get the current weather for a city & country.",
	Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","description":"City name"},` +
		`"days":{"type":"integer"},"units":{"type":"string","enum":["c","f"]}},"required":["city"]}`),
}

var searchTool = Tool{
	Name:        "search",
	Description: "Suche im Web — 検索",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"},"filters":{"type":"object"},"limit":{"type":"number"},"safe":{"type":"boolean"}}}`),
}

func call(id, name, args string) ToolCall {
	return ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: name, Arguments: args}}
}

// conversations covers what llama-server sends a template: system and user
// turns, many turns, tool declarations, assistant tool calls (object
// arguments of every JSON type), tool results matched by id and by order,
// reasoning content, non-ASCII text, thinking on and off, and
// add_generation_prompt on and off.
func conversations() []conversation {
	off := false
	return []conversation{
		{name: "system_user_genprompt", in: Input{
			Messages: []Message{
				{Role: "system", Content: "You are a concise assistant."},
				{Role: "user", Content: "What is 2+2?"},
			},
			AddGenerationPrompt: true,
		}},
		{name: "user_no_genprompt", in: Input{
			Messages: []Message{{Role: "user", Content: "Hello there."}},
		}},
		{name: "multi_turn_thinking_off", in: Input{
			Messages: []Message{
				{Role: "system", Content: "Be brief."},
				{Role: "user", Content: "Name a colour."},
				{Role: "assistant", Content: "Blue."},
				{Role: "user", Content: "Another one."},
				{Role: "assistant", Content: "Green."},
				{Role: "user", Content: "And a third?"},
			},
			AddGenerationPrompt: true,
			Kwargs:              kw("thinking", "false"),
		}},
		{name: "tools_declared", in: Input{
			Messages:            []Message{{Role: "user", Content: "Weather in Paris?"}},
			Tools:               []Tool{weatherTool, searchTool},
			AddGenerationPrompt: true,
		}},
		{name: "tool_call_and_result", in: Input{
			Messages: []Message{
				{Role: "user", Content: "Weather in Paris for 3 days?"},
				{Role: "assistant", ReasoningContent: "I should call the weather tool.", ToolCalls: []ToolCall{
					call("call_1", "get_weather", `{"city":"Paris","days":3,"units":"c"}`),
				}},
				{Role: "tool", ToolCallID: "call_1", Content: `{"temp": 18, "sky": "clear"}`},
				{Role: "assistant", Content: "It is 18°C and clear in Paris."},
				{Role: "user", Content: "Thanks!"},
			},
			Tools:               []Tool{weatherTool},
			AddGenerationPrompt: true,
		}},
		{name: "parallel_calls_results_out_of_order", in: Input{
			Messages: []Message{
				{Role: "user", Content: "Compare Oslo and Rome."},
				{Role: "assistant", ToolCalls: []ToolCall{
					call("a", "get_weather", `{"city":"Oslo"}`),
					call("b", "get_weather", `{"city":"Rome","days":2}`),
				}},
				{Role: "tool", ToolCallID: "b", Content: "Rome: 25C"},
				{Role: "tool", ToolCallID: "a", Content: "Oslo: 4C"},
			},
			Tools:               []Tool{weatherTool},
			AddGenerationPrompt: true,
		}},
		{name: "tool_results_by_order_and_name", in: Input{
			Messages: []Message{
				{Role: "user", Content: "Search two things."},
				{Role: "assistant", Content: "Searching.", ToolCalls: []ToolCall{
					call("", "search", `{"query":"go generics"}`),
					call("", "search", `{"query":"jinja"}`),
				}},
				{Role: "tool", Content: "result one"},
				{Role: "tool", Name: "search", Content: "result two"},
			},
			Tools:               []Tool{searchTool},
			AddGenerationPrompt: true,
		}},
		{name: "argument_types", in: Input{
			Messages: []Message{
				{Role: "user", Content: "Find things."},
				{Role: "assistant", ToolCalls: []ToolCall{call("c9", "search",
					`{"query":"a \"quoted\" <tag> & more","filters":{"zeta":[1,2.5,"x",null],"alpha":{"b":true}},"limit":10,"safe":false,"none":null}`)}},
				{Role: "tool", ToolCallID: "c9", Content: "[]"},
			},
			Tools:               []Tool{searchTool},
			AddGenerationPrompt: true,
		}},
		{name: "reasoning_history_thinking_on", in: Input{
			Messages: []Message{
				{Role: "user", Content: "Is 91 prime?"},
				{Role: "assistant", ReasoningContent: "91 = 7 × 13.", Content: "No, 91 = 7 × 13."},
				{Role: "user", Content: "And 97?"},
			},
			AddGenerationPrompt: true,
		}},
		{name: "reasoning_history_thinking_off", in: Input{
			Messages: []Message{
				{Role: "user", Content: "Is 91 prime?"},
				{Role: "assistant", ReasoningContent: "91 = 7 × 13.", Content: "No, 91 = 7 × 13."},
				{Role: "user", Content: "And 97?"},
			},
			AddGenerationPrompt: true,
			Kwargs:              kw("thinking", "false"),
			EnableThinking:      &off,
		}},
		{name: "non_ascii", in: Input{
			Messages: []Message{
				{Role: "system", Content: "Réponds en français, s'il te plaît. 🇫🇷"},
				{Role: "user", Content: "日本語で説明してください — Ünïcödé ✓ \u00a0 tab\tnewline\n end"},
				{Role: "assistant", ReasoningContent: "Думаю…", Content: "はい、わかりました。😀"},
				{Role: "user", Content: "Ελληνικά; العربية؟"},
			},
			AddGenerationPrompt: true,
		}},
		{name: "content_parts", in: Input{
			Messages: []Message{
				{Role: "user", Parts: []ContentPart{{Type: "text", Text: "First part."}, {Type: "text", Text: "Second part."}}},
			},
			AddGenerationPrompt: true,
		}},
		{name: "names_need_escaping", in: Input{
			Messages: []Message{
				{Role: "system", Name: `ops & "admins"`, Content: "Policy text."},
				{Role: "user", Name: "alice", Content: "Hi <b>bold</b> & \"quoted\""},
				{Role: "developer", Content: "Developer note becomes system."},
			},
			AddGenerationPrompt: true,
		}},
		{name: "thinking_effort_low_tool_choice_required", in: Input{
			Messages:            []Message{{Role: "user", Content: "Call a tool."}},
			Tools:               []Tool{weatherTool},
			AddGenerationPrompt: true,
			Kwargs:              kw("thinking_effort", `"low"`, "tool_choice", `"required"`),
		}},
		{name: "response_format_json_schema", in: Input{
			Messages:            []Message{{Role: "user", Content: "Give me a person."}},
			AddGenerationPrompt: true,
			Kwargs: kw("response_format", `{"type":"json_schema","json_schema":{"name":"p","schema":`+
				`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name"]}}}`),
		}},
		{name: "no_arguments_and_tool_choice_none", in: Input{
			Messages: []Message{
				{Role: "user", Content: "Ping."},
				{Role: "assistant", ToolCalls: []ToolCall{call("p1", "ping", "{}")}},
				{Role: "tool", ToolCallID: "p1", Content: "pong"},
				{Role: "assistant", Content: "Pong received."},
			},
			Tools:               []Tool{{Name: "ping"}},
			AddGenerationPrompt: false,
			Kwargs:              kw("tool_choice", `"none"`),
		}},
		{name: "empty_arguments_text_rejected", wantErr: true, in: Input{
			Messages: []Message{
				{Role: "user", Content: "Ping."},
				{Role: "assistant", ToolCalls: []ToolCall{call("p1", "ping", "")}},
			},
			Tools: []Tool{{Name: "ping"}},
		}},
		{name: "bad_thinking_effort", wantErr: true, in: Input{
			Messages:            []Message{{Role: "user", Content: "x"}},
			AddGenerationPrompt: true,
			Kwargs:              kw("thinking_effort", `"extreme"`),
		}},
	}
}
