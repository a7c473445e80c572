package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/sample"
)

// responseObject is the Responses API's response, whole or in the
// created / completed stream events.
type responseObject struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	Error              *apiError       `json:"error"`
	IncompleteDetails  *incomplete     `json:"incomplete_details"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Model              string          `json:"model"`
	Output             []any           `json:"output"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              bool            `json:"store"`
	Temperature        float64         `json:"temperature"`
	TopP               float64         `json:"top_p"`
	ToolChoice         any             `json:"tool_choice"`
	Tools              []responseTool  `json:"tools"`
	Text               json.RawMessage `json:"text"`
	Truncation         string          `json:"truncation"`
	Metadata           map[string]any  `json:"metadata"`
	Usage              *responseUsage  `json:"usage"`
}

type incomplete struct {
	Reason string `json:"reason"`
}

type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// Output items.
type (
	outputMessage struct {
		ID      string       `json:"id"`
		Type    string       `json:"type"`
		Role    string       `json:"role"`
		Status  string       `json:"status"`
		Content []outputText `json:"content"`
	}
	outputText struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Annotations []any  `json:"annotations"`
	}
	reasoningItem struct {
		ID      string          `json:"id"`
		Type    string          `json:"type"`
		Status  string          `json:"status"`
		Summary []any           `json:"summary"`
		Content []reasoningText `json:"content"`
	}
	reasoningText struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	functionCallItem struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		Status    string `json:"status"`
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
)

// responsesChat turns a Responses request into a chat request, with the
// conversation so far (history, for the store) and its instructions apart.
func (s *Server) responsesChat(req *responsesRequest) (chatRequest, []chatMessage, *apiError) {
	input, aerr := responsesInput(req.Input)
	if aerr != nil {
		return chatRequest{}, nil, aerr
	}
	var history []chatMessage
	if req.PreviousResponseID != "" {
		prev, ok := s.respStore.get(req.PreviousResponseID)
		if !ok {
			return chatRequest{}, nil, errBadRequest(
				fmt.Sprintf("previous response with id %q not found (responses are kept in memory, the last %d)", req.PreviousResponseID, responseStoreSize))
		}
		history = append(history, prev...)
	}
	history = append(history, input...)
	creq := chatRequest{Model: req.Model, samplingFields: req.samplingFields, ChatTemplateKwargs: req.ChatTemplateKwargs}
	if req.Instructions != nil {
		creq.Messages = append(creq.Messages, chatMessage{Role: "system", Content: content{Text: *req.Instructions, isSet: true}})
	}
	creq.Messages = append(creq.Messages, history...)
	if req.MaxOutputTokens != nil {
		if *req.MaxOutputTokens < 1 {
			return chatRequest{}, nil, errInvalid(fmt.Sprintf("max_output_tokens = %d must be at least 1", *req.MaxOutputTokens))
		}
		creq.MaxTokens = req.MaxOutputTokens
	}
	for i, t := range req.Tools {
		if t.Type != "function" {
			return chatRequest{}, nil, errInvalid(fmt.Sprintf("tools[%d]: type %q is not supported (want function)", i, t.Type))
		}
		var d toolDecl
		d.Type = "function"
		d.Function.Name, d.Function.Description, d.Function.Parameters = t.Name, t.Description, t.Parameters
		creq.Tools = append(creq.Tools, d)
	}
	creq.ToolChoice, aerr = responsesToolChoice(req.ToolChoice)
	if aerr != nil {
		return chatRequest{}, nil, aerr
	}
	if creq.ResponseFormat, aerr = responsesFormat(req.Text); aerr != nil {
		return chatRequest{}, nil, aerr
	}
	creq.StreamOptions = nil
	return creq, history, nil
}

func (s *Server) responses(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	var req responsesRequest
	if aerr := s.readJSON(c, &req); aerr != nil {
		return aerr
	}
	creq, history, aerr := s.responsesChat(&req)
	if aerr != nil {
		return aerr
	}
	cj, aerr := s.prepareChat(b, &creq, "responses")
	if aerr != nil {
		return aerr
	}
	resp := responseObject{ID: newID("resp_"), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress",
		Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, Model: s.modelID(b), Output: []any{},
		ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls, Store: req.Store == nil || *req.Store,
		Temperature: valueOr(req.Temperature, defaultTemperature), TopP: valueOr(req.TopP, defaultTopP), ToolChoice: "auto",
		Tools: req.Tools, Text: json.RawMessage(`{"format":{"type":"text"}}`), Truncation: "disabled", Metadata: req.Metadata}
	if present(req.Text) {
		resp.Text = req.Text
	}
	if resp.Tools == nil {
		resp.Tools = []responseTool{}
	}
	if resp.Metadata == nil {
		resp.Metadata = map[string]any{}
	}
	if len(req.ToolChoice) > 0 {
		resp.ToolChoice = req.ToolChoice
	}
	if req.PreviousResponseID != "" {
		resp.PreviousResponseID = &req.PreviousResponseID
	}
	out := &respOutput{resp: &resp}
	bl := &blocks{sink: out}
	start := func() error {
		if !req.Stream {
			return nil
		}
		out.w = s.startSSE(c)
		if err := out.event("response.created", map[string]any{"response": resp}); err != nil {
			return err
		}
		return out.event("response.in_progress", map[string]any{"response": resp})
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
			_ = out.event("error", map[string]any{"code": e.Type, "message": e.Message, "param": nil})
		}
		return nil
	}
	resp.Status = "completed"
	if o.res.Finish == sample.FinishLength && len(o.parsed.ToolCalls) == 0 {
		resp.Status, resp.IncompleteDetails = "incomplete", &incomplete{Reason: "max_output_tokens"}
	}
	u := &responseUsage{InputTokens: o.res.PromptTokens, OutputTokens: o.res.GeneratedTokens, TotalTokens: o.res.PromptTokens + o.res.GeneratedTokens}
	u.InputTokensDetails.CachedTokens = o.res.CachedTokens
	resp.Usage = u
	if resp.Store {
		s.respStore.put(resp.ID, append(history, out.asMessage()))
	}
	if out.w == nil {
		return s.writeJSON(c, resp)
	}
	_ = out.event("response."+resp.Status, map[string]any{"response": resp})
	return nil
}

// respOutput builds a response's output items from the reply's blocks
// and, when streaming, sends the events that tell a client about them.
type respOutput struct {
	resp *responseObject
	w    *sse // nil: not streaming
	seq  int
	id   string          // the open item's id
	text strings.Builder // the open item's text or arguments
	call *chat.ToolCallDelta
}

// event sends one stream event with its type and sequence number.
func (r *respOutput) event(typ string, fields map[string]any) error {
	if r.w == nil {
		return nil
	}
	fields["type"], fields["sequence_number"] = typ, r.seq
	r.seq++
	b, err := json.Marshal(fields)
	if err != nil {
		return fmt.Errorf("responses: encode %s: %w", typ, err)
	}
	return r.w.raw("event: " + typ + "\ndata: " + string(b) + "\n\n")
}

func (r *respOutput) index() int { return len(r.resp.Output) }

func (r *respOutput) open(kind blockKind, call *chat.ToolCallDelta) error {
	r.text.Reset()
	var item any
	switch kind {
	case blockReasoning:
		r.id = newID("rs_")
		item = reasoningItem{ID: r.id, Type: "reasoning", Status: "in_progress", Summary: []any{}, Content: []reasoningText{}}
	case blockText:
		r.id = newID("msg_")
		item = outputMessage{ID: r.id, Type: "message", Role: "assistant", Status: "in_progress", Content: []outputText{}}
	case blockTool:
		r.id, r.call = newID("fc_"), call
		item = functionCallItem{ID: r.id, Type: "function_call", Status: "in_progress", CallID: call.ID, Name: call.Name}
	}
	if err := r.event("response.output_item.added", map[string]any{"output_index": r.index(), "item": item}); err != nil {
		return err
	}
	if kind == blockText {
		return r.event("response.content_part.added", map[string]any{"item_id": r.id, "output_index": r.index(),
			"content_index": 0, "part": outputText{Type: "output_text", Annotations: []any{}}})
	}
	return nil
}

func (r *respOutput) delta(kind blockKind, text string) error {
	r.text.WriteString(text)
	f := map[string]any{"item_id": r.id, "output_index": r.index(), "delta": text}
	switch kind {
	case blockReasoning:
		f["content_index"] = 0
		return r.event("response.reasoning_text.delta", f)
	case blockText:
		f["content_index"], f["logprobs"] = 0, []any{}
		return r.event("response.output_text.delta", f)
	}
	return r.event("response.function_call_arguments.delta", f)
}

func (r *respOutput) close(kind blockKind) error {
	text, idx := r.text.String(), r.index()
	var item any
	var err error
	switch kind {
	case blockReasoning:
		item = reasoningItem{ID: r.id, Type: "reasoning", Status: "completed", Summary: []any{},
			Content: []reasoningText{{Type: "reasoning_text", Text: text}}}
		err = r.event("response.reasoning_text.done", map[string]any{"item_id": r.id, "output_index": idx, "content_index": 0, "text": text})
	case blockText:
		part := outputText{Type: "output_text", Text: text, Annotations: []any{}}
		item = outputMessage{ID: r.id, Type: "message", Role: "assistant", Status: "completed", Content: []outputText{part}}
		err = r.event("response.output_text.done", map[string]any{"item_id": r.id, "output_index": idx, "content_index": 0, "text": text, "logprobs": []any{}})
		if err == nil {
			err = r.event("response.content_part.done", map[string]any{"item_id": r.id, "output_index": idx, "content_index": 0, "part": part})
		}
	case blockTool:
		item = functionCallItem{ID: r.id, Type: "function_call", Status: "completed", CallID: r.call.ID, Name: r.call.Name, Arguments: text}
		err = r.event("response.function_call_arguments.done", map[string]any{"item_id": r.id, "output_index": idx, "arguments": text})
	}
	if err != nil {
		return err
	}
	r.resp.Output = append(r.resp.Output, item)
	return r.event("response.output_item.done", map[string]any{"output_index": idx, "item": item})
}

// asMessage is the output as the assistant message a later turn sees.
func (r *respOutput) asMessage() chatMessage {
	m := chatMessage{Role: "assistant"}
	for _, it := range r.resp.Output {
		switch it := it.(type) {
		case reasoningItem:
			for _, c := range it.Content {
				m.ReasoningContent += c.Text
			}
		case outputMessage:
			for _, c := range it.Content {
				m.Content = content{Text: m.Content.Text + c.Text, isSet: true}
			}
		case functionCallItem:
			m.ToolCalls = append(m.ToolCalls, chatToolCall(it.CallID, it.Name, it.Arguments))
		}
	}
	return m
}

// agentRoutes registers the APIs agent tools speak: OpenAI's Responses and
// Anthropic's Messages.
func (s *Server) agentRoutes(e *echo.Echo) {
	for _, p := range []string{"/v1/responses", "/responses"} {
		e.POST(p, s.responses, requireJSON)
	}
	e.POST("/v1/messages", s.messages, requireJSON)
	e.POST("/v1/messages/count_tokens", s.countTokens, requireJSON)
}

func valueOr(v *float64, def float64) float64 {
	if v == nil {
		return def
	}
	return *v
}
