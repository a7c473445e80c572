package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// messagesRequest is the body of POST /v1/messages (and of count_tokens,
// which ignores the generation fields). The chat sampling fields are
// accepted too (max_tokens, temperature, top_p, top_k, stream, seed).
type messagesRequest struct {
	Model         string          `json:"model"`
	System        json.RawMessage `json:"system"`
	Messages      []anthMessage   `json:"messages"`
	Tools         []anthTool      `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	StopSequences []string        `json:"stop_sequences"`
	Thinking      *struct {
		Type string `json:"type"`
	} `json:"thinking"`
	Metadata json.RawMessage `json:"metadata"`
	samplingFields
}

type anthMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	Type        string          `json:"type"`
}

// anthBlock is one content block of a request message.
type anthBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// defaultAnthropicMaxTokens is what a request without max_tokens gets;
// Anthropic requires the field, llama-server and other local servers
// default it.
const defaultAnthropicMaxTokens = 400

// messagesChat turns a Messages request into a chat request.
func messagesChat(req *messagesRequest) (chatRequest, *apiError) {
	creq := chatRequest{Model: req.Model, samplingFields: req.samplingFields}
	if creq.MaxTokens == nil {
		n := defaultAnthropicMaxTokens
		creq.MaxTokens = &n
	}
	creq.Stop = append(stopList(nil), req.StopSequences...)
	if sys := bytes.TrimSpace(req.System); len(sys) > 0 && !bytes.Equal(sys, []byte("null")) {
		text, aerr := blocksText(sys, "system")
		if aerr != nil {
			return creq, aerr
		}
		creq.Messages = append(creq.Messages, chatMessage{Role: "system", Content: content{Text: text, isSet: true}})
	}
	if len(req.Messages) == 0 {
		return creq, errBadRequest("messages: at least one message is required")
	}
	for i, m := range req.Messages {
		msgs, aerr := anthMessageToChat(m, fmt.Sprintf("messages[%d]", i))
		if aerr != nil {
			return creq, aerr
		}
		creq.Messages = append(creq.Messages, msgs...)
	}
	for i, t := range req.Tools {
		if t.Type != "" && t.Type != "custom" {
			return creq, errBadRequest(fmt.Sprintf("tools[%d]: type %q is not supported (want a custom tool with input_schema)", i, t.Type))
		}
		var d toolDecl
		d.Type = "function"
		d.Function.Name, d.Function.Description, d.Function.Parameters = t.Name, t.Description, t.InputSchema
		creq.Tools = append(creq.Tools, d)
	}
	choice, aerr := anthToolChoice(req.ToolChoice)
	if aerr != nil {
		return creq, aerr
	}
	creq.ToolChoice = choice
	if req.Thinking != nil {
		on := req.Thinking.Type != "disabled"
		b, _ := json.Marshal(on)
		// enable_thinking is the common switch; Kimi's templates read "thinking".
		creq.ChatTemplateKwargs = map[string]json.RawMessage{"enable_thinking": b, "thinking": b}
	}
	return creq, nil
}

// anthMessageToChat maps one message: a user turn's tool_result blocks
// become tool messages (before its text), an assistant turn's thinking,
// text and tool_use blocks one assistant message.
func anthMessageToChat(m anthMessage, where string) ([]chatMessage, *apiError) {
	if m.Role != "user" && m.Role != "assistant" {
		return nil, errBadRequest(fmt.Sprintf("%s.role: %q is not user or assistant", where, m.Role))
	}
	raw := bytes.TrimSpace(m.Content)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return []chatMessage{{Role: m.Role, Content: content{Text: s, isSet: true}}}, nil
	}
	var blocks []anthBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, errBadRequest(where + ".content must be a string or an array of content blocks")
	}
	var out []chatMessage
	main := chatMessage{Role: m.Role}
	for j, b := range blocks {
		at := fmt.Sprintf("%s.content[%d]", where, j)
		switch b.Type {
		case "text":
			if b.Text == nil {
				return nil, errBadRequest(at + ": text block has no text")
			}
			main.Content = content{Text: main.Content.Text + *b.Text, isSet: true}
		case "thinking":
			if m.Role != "assistant" {
				return nil, errBadRequest(at + ": thinking blocks belong to assistant messages")
			}
			main.ReasoningContent += b.Thinking
		case "redacted_thinking":
		case "tool_use":
			if m.Role != "assistant" {
				return nil, errBadRequest(at + ": tool_use blocks belong to assistant messages")
			}
			if b.ID == "" || b.Name == "" {
				return nil, errBadRequest(at + ": tool_use needs id and name")
			}
			args := string(bytes.TrimSpace(b.Input))
			if args == "" || args == "null" {
				args = "{}"
			}
			main.ToolCalls = append(main.ToolCalls, chatToolCall(b.ID, b.Name, args))
		case "tool_result":
			if m.Role != "user" {
				return nil, errBadRequest(at + ": tool_result blocks belong to user messages")
			}
			if b.ToolUseID == "" {
				return nil, errBadRequest(at + ": tool_result needs tool_use_id")
			}
			text := ""
			if c := bytes.TrimSpace(b.Content); len(c) > 0 && !bytes.Equal(c, []byte("null")) {
				var aerr *apiError
				if text, aerr = blocksText(c, at+".content"); aerr != nil {
					return nil, aerr
				}
			}
			out = append(out, chatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: content{Text: text, isSet: true}})
		default:
			return nil, errBadRequest(fmt.Sprintf("%s: block type %q is not supported (want text, thinking, tool_use or tool_result)", at, b.Type))
		}
	}
	if main.Content.isSet || main.ReasoningContent != "" || len(main.ToolCalls) > 0 {
		out = append(out, main)
	}
	if len(out) == 0 {
		return nil, errBadRequest(where + ".content is empty")
	}
	return out, nil
}

// blocksText is a string, or the text of an array of text blocks joined.
func blocksText(raw json.RawMessage, where string) (string, *apiError) {
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", errBadRequest(where + ": " + err.Error())
		}
		return s, nil
	}
	var blocks []anthBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", errBadRequest(where + " must be a string or an array of text blocks")
	}
	var sb strings.Builder
	for j, b := range blocks {
		if b.Type != "text" || b.Text == nil {
			return "", errBadRequest(fmt.Sprintf("%s[%d]: only text blocks are supported here", where, j))
		}
		sb.WriteString(*b.Text)
	}
	return sb.String(), nil
}

// anthToolChoice maps {"type":"auto"|"any"|"tool"|"none"} to chat
// completions' tool_choice.
func anthToolChoice(raw json.RawMessage) (json.RawMessage, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &tc); err != nil {
		return nil, errBadRequest("tool_choice must be an object with a type")
	}
	switch tc.Type {
	case "auto":
		return json.RawMessage(`"auto"`), nil
	case "any":
		return json.RawMessage(`"required"`), nil
	case "none":
		return json.RawMessage(`"none"`), nil
	case "tool":
		if tc.Name == "" {
			return nil, errBadRequest(`tool_choice of type "tool" needs a name`)
		}
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		return b, nil
	}
	return nil, errBadRequest(fmt.Sprintf("tool_choice type %q is not auto, any, tool or none", tc.Type))
}

// anthropicErrorType is Anthropic's error type for a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusUnsupportedMediaType, http.StatusMethodNotAllowed:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	return "api_error"
}

// anthropicError is an error in Anthropic's shape. A request Anthropic
// would call invalid is a 400 there, as in the rest of k3; a 422 is mapped
// all the same.
func anthropicError(e *apiError) (int, map[string]any) {
	status := e.Status
	if status == http.StatusUnprocessableEntity {
		status = http.StatusBadRequest
	}
	return status, map[string]any{"type": "error", "error": map[string]string{"type": anthropicErrorType(e.Status), "message": e.Message}}
}

// isAnthropicPath tells the routes whose errors take Anthropic's shape.
func isAnthropicPath(path string) bool {
	return path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/")
}
