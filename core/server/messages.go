package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/sample"
)

// anthMessageOut is the Messages API's reply, whole or (empty) in
// message_start.
type anthMessageOut struct {
	ID           string    `json:"id"`
	Type         string    `json:"type"`
	Role         string    `json:"role"`
	Model        string    `json:"model"`
	Content      []any     `json:"content"`
	StopReason   *string   `json:"stop_reason"`
	StopSequence *string   `json:"stop_sequence"`
	Usage        anthUsage `json:"usage"`
}

type anthUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// Content blocks of a reply.
type (
	anthText struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	anthThinking struct {
		Type      string `json:"type"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
	}
	anthToolUse struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
)

func (s *Server) messages(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	var req messagesRequest
	if aerr := s.readJSON(c, &req); aerr != nil {
		return aerr
	}
	creq, aerr := messagesChat(&req)
	if aerr != nil {
		return aerr
	}
	cj, aerr := s.prepareChat(b, &creq, "messages")
	if aerr != nil {
		return aerr
	}
	msg := anthMessageOut{ID: newID("msg_"), Type: "message", Role: "assistant", Model: s.modelID(b), Content: []any{},
		Usage: anthUsage{InputTokens: len(cj.j.prompt)}}
	out := &anthOutput{msg: &msg}
	bl := &blocks{sink: out}
	start := func() error {
		if !req.Stream {
			return nil
		}
		out.w = s.startSSE(c)
		return out.event("message_start", map[string]any{"message": msg})
	}
	o, err := s.runChat(c, b, cj, start, bl.feed)
	if err == nil {
		err = bl.finish()
	}
	if out.w == nil && err != nil {
		return quietIfGone(cutShort(err))
	}
	if err != nil {
		if e := s.streamError(c, err); e != nil {
			_, body := anthropicError(e)
			_ = out.event("error", body)
		}
		return nil
	}
	reason := "end_turn"
	switch {
	case len(o.parsed.ToolCalls) > 0:
		reason = "tool_use"
	case o.stop != "":
		reason, msg.StopSequence = "stop_sequence", &o.stop
	case o.res.Finish == sample.FinishLength:
		reason = "max_tokens"
	}
	msg.StopReason = &reason
	msg.Usage = anthUsage{InputTokens: o.res.PromptTokens - o.res.CachedTokens, OutputTokens: o.res.GeneratedTokens,
		CacheReadInputTokens: o.res.CachedTokens}
	if out.w == nil {
		return s.writeJSON(c, msg)
	}
	if out.event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": reason, "stop_sequence": msg.StopSequence},
		"usage": msg.Usage}) != nil {
		return nil
	}
	_ = out.event("message_stop", map[string]any{})
	return nil
}

// countTokens answers /v1/messages/count_tokens: the prompt's length as
// the chat template renders the request.
func (s *Server) countTokens(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	var req messagesRequest
	if aerr := s.readJSON(c, &req); aerr != nil {
		return aerr
	}
	req.MaxTokens, req.Stream = nil, false
	creq, aerr := messagesChat(&req)
	if aerr != nil {
		return aerr
	}
	one := 1
	creq.MaxTokens = &one // a count generates nothing; only the prompt must fit
	cj, aerr := s.prepareChat(b, &creq, "count_tokens")
	if aerr != nil {
		return aerr
	}
	return c.JSON(http.StatusOK, map[string]int{"input_tokens": len(cj.j.prompt)})
}

// anthOutput builds a reply's content blocks and, when streaming, sends
// Anthropic's content_block events for them.
type anthOutput struct {
	msg  *anthMessageOut
	w    *sse // nil: not streaming
	text strings.Builder
	call *chat.ToolCallDelta
}

func (a *anthOutput) event(typ string, fields map[string]any) error {
	if a.w == nil {
		return nil
	}
	if _, ok := fields["type"]; !ok {
		fields["type"] = typ
	}
	b, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("messages: encode %s: %w", typ, err)
	}
	return a.w.raw("event: " + typ + "\ndata: " + string(b) + "\n\n")
}

func (a *anthOutput) open(kind blockKind, call *chat.ToolCallDelta) error {
	a.text.Reset()
	var block any
	switch kind {
	case blockReasoning:
		block = anthThinking{Type: "thinking"}
	case blockText:
		block = anthText{Type: "text"}
	case blockTool:
		a.call = call
		block = anthToolUse{Type: "tool_use", ID: call.ID, Name: call.Name, Input: json.RawMessage("{}")}
	}
	return a.event("content_block_start", map[string]any{"index": len(a.msg.Content), "content_block": block})
}

func (a *anthOutput) delta(kind blockKind, text string) error {
	a.text.WriteString(text)
	var d map[string]string
	switch kind {
	case blockReasoning:
		d = map[string]string{"type": "thinking_delta", "thinking": text}
	case blockText:
		d = map[string]string{"type": "text_delta", "text": text}
	default:
		d = map[string]string{"type": "input_json_delta", "partial_json": text}
	}
	return a.event("content_block_delta", map[string]any{"index": len(a.msg.Content), "delta": d})
}

func (a *anthOutput) close(kind blockKind) error {
	text := a.text.String()
	var block any
	switch kind {
	case blockReasoning:
		block = anthThinking{Type: "thinking", Thinking: text}
	case blockText:
		block = anthText{Type: "text", Text: text}
	case blockTool:
		block = anthToolUse{Type: "tool_use", ID: a.call.ID, Name: a.call.Name, Input: toolInput(text)}
	}
	idx := len(a.msg.Content)
	a.msg.Content = append(a.msg.Content, block)
	return a.event("content_block_stop", map[string]any{"index": idx})
}

// toolInput is a call's arguments as tool_use.input, which must be an
// object: arguments that are not one (a reply cut short) give {}.
func toolInput(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		return json.RawMessage("{}")
	}
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(args)) != nil {
		return json.RawMessage("{}")
	}
	return buf.Bytes()
}
