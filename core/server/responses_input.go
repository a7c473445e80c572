package server

import (
	"bytes"
	"container/list"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/k3-inference/k3/core/chat"
)

// responsesRequest is the body of POST /v1/responses. The sampling fields
// of chat completions are accepted too (top_k, seed, ...), as llama-server
// passes them through.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	PreviousResponseID string          `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Tools              []responseTool  `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Metadata           map[string]any  `json:"metadata"`
	// Text holds the output format: {"format": {"type": "text" |
	// "json_object" | "json_schema", "name", "schema", "strict"}}.
	Text json.RawMessage `json:"text"`
	samplingFields
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
}

// responseTool is a Responses API tool: flat, not nested under "function".
type responseTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict,omitempty"`
}

// inputItem is one entry of input: a message, a function call, its output
// or a reasoning item (the kinds a client resends from earlier output).
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// responsesInput turns input into chat messages. Consecutive assistant
// items (reasoning, message, function calls) make one assistant message.
func responsesInput(raw json.RawMessage) ([]chatMessage, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errBadRequest("input is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errBadRequest("input: " + err.Error())
		}
		return []chatMessage{{Role: "user", Content: content{Text: s, isSet: true}}}, nil
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errBadRequest("input must be a string or an array of items")
	}
	var msgs []chatMessage
	// assistant is the message the assistant items go into, opened on demand.
	assistant := func() *chatMessage {
		if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
			return &msgs[n-1]
		}
		msgs = append(msgs, chatMessage{Role: "assistant"})
		return &msgs[len(msgs)-1]
	}
	for i, it := range items {
		where := fmt.Sprintf("input[%d]", i)
		switch {
		case it.Type == "function_call":
			if it.CallID == "" || it.Name == "" || it.Arguments == nil {
				return nil, errBadRequest(where + ": function_call needs call_id, name and arguments")
			}
			a := assistant()
			a.ToolCalls = append(a.ToolCalls, chatToolCall(it.CallID, it.Name, *it.Arguments))
		case it.Type == "function_call_output":
			text, aerr := itemText(it.Output, where+".output")
			if aerr != nil {
				return nil, aerr
			}
			if it.CallID == "" {
				return nil, errBadRequest(where + ": function_call_output needs call_id")
			}
			msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: content{Text: text, isSet: true}})
		case it.Type == "reasoning":
			var r struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			}
			b, _ := json.Marshal(map[string]json.RawMessage{"content": it.Content})
			if err := json.Unmarshal(b, &r); err != nil {
				return nil, errBadRequest(where + ": reasoning content must be an array of {text}")
			}
			a := assistant()
			for _, c := range r.Content {
				a.ReasoningContent += c.Text
			}
		case it.Type == "message" || it.Type == "":
			if !knownRoles[it.Role] || it.Role == "tool" {
				return nil, errBadRequest(fmt.Sprintf("%s: unknown role %q (want user, system, developer or assistant)", where, it.Role))
			}
			text, aerr := itemText(it.Content, where+".content")
			if aerr != nil {
				return nil, aerr
			}
			if it.Role == "assistant" {
				a := assistant()
				a.Content = content{Text: a.Content.Text + text, isSet: true}
				continue
			}
			msgs = append(msgs, chatMessage{Role: it.Role, Content: content{Text: text, isSet: true}})
		default:
			return nil, errBadRequest(fmt.Sprintf("%s: item type %q is not supported (want message, function_call, function_call_output or reasoning)", where, it.Type))
		}
	}
	return msgs, nil
}

// itemText is a content or output value: a string, or an array of text
// parts (input_text, output_text, text) joined.
func itemText(raw json.RawMessage, where string) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", errBadRequest(where + ": " + err.Error())
		}
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil || len(raw) == 0 {
		return "", errBadRequest(where + " must be a string or an array of content parts")
	}
	var out string
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			if p.Text == nil {
				return "", errBadRequest(fmt.Sprintf("%s[%d]: %s part has no text", where, j, p.Type))
			}
			out += *p.Text
		case "refusal":
		default:
			return "", errBadRequest(fmt.Sprintf("%s[%d]: part type %q is not supported (want input_text or output_text)", where, j, p.Type))
		}
	}
	return out, nil
}

func chatToolCall(id, name, args string) chat.ToolCall {
	return chat.ToolCall{ID: id, Type: "function", Function: chat.FunctionCall{Name: name, Arguments: args}}
}

// responsesToolChoice maps tool_choice to chat completions' form: a string
// passes, {"type":"function","name":N} becomes {"function":{"name":N}}.
func responsesToolChoice(raw json.RawMessage) (json.RawMessage, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return raw, nil
	}
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" || named.Name == "" {
		return nil, errBadRequest(`tool_choice object must be {"type":"function","name":...}`)
	}
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
	return b, nil
}

// responseStore keeps the conversations of stored responses, so that a
// request can continue one with previous_response_id. It holds at most
// responseStoreSize, dropping the least recently used.
type responseStore struct {
	mu    sync.Mutex
	order *list.List // of *storedResponse, most recent first
	byID  map[string]*list.Element
}

const responseStoreSize = 128

type storedResponse struct {
	id string
	// history is the conversation up to and including this response's
	// output, without instructions (they do not carry over).
	history []chatMessage
}

func (s *responseStore) put(id string, history []chatMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.order == nil {
		s.order, s.byID = list.New(), map[string]*list.Element{}
	}
	s.byID[id] = s.order.PushFront(&storedResponse{id: id, history: history})
	for s.order.Len() > responseStoreSize {
		old := s.order.Remove(s.order.Back()).(*storedResponse)
		delete(s.byID, old.id)
	}
}

func (s *responseStore) get(id string) ([]chatMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if !ok {
		return nil, false
	}
	s.order.MoveToFront(e)
	return e.Value.(*storedResponse).history, true
}

// responsesFormat turns the Responses API's text.format into the chat
// response_format (its json_schema form is flat: name and schema beside
// the type).
func responsesFormat(text json.RawMessage) (json.RawMessage, *apiError) {
	if !present(text) {
		return nil, nil
	}
	var t struct {
		Format json.RawMessage `json:"format"`
	}
	if err := json.Unmarshal(text, &t); err != nil {
		return nil, errInvalid("text must be an object")
	}
	if !present(t.Format) {
		return nil, nil
	}
	var f struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	}
	if err := json.Unmarshal(t.Format, &f); err != nil {
		return nil, errInvalid("text.format must be an object with a type")
	}
	switch f.Type {
	case "text", "json_object":
		return json.RawMessage(`{"type":"` + f.Type + `"}`), nil
	case "json_schema":
		if !present(f.Schema) {
			return nil, errInvalid("text.format.schema is required for type json_schema")
		}
		b, _ := json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": f.Name, "schema": f.Schema}})
		return b, nil
	}
	return nil, errInvalid(`text.format.type must be "text", "json_object" or "json_schema", not "` + f.Type + `"`)
}
