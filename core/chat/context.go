package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Message is one chat message in OpenAI's shape, as the server receives it.
type Message struct {
	Role string `json:"role"`
	// Content is the text; Parts, when non-nil, replaces it with typed parts.
	Content          string        `json:"content"`
	Parts            []ContentPart `json:"parts,omitempty"`
	ReasoningContent string        `json:"reasoning_content,omitempty"`
	// Name is the author's name, or for a tool message the tool's name.
	Name       string     `json:"name,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
}

// ContentPart is one typed piece of a message's content. Only "text" parts
// reach a template; others are dropped, as llama.cpp drops them.
type ContentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ToolCall is an assistant's call of a function.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its arguments as a JSON text,
// as OpenAI's API does.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool declares a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Parameters is a JSON Schema object; empty means {}.
	Parameters json.RawMessage
}

// Input is everything a chat template is rendered from.
type Input struct {
	Messages            []Message
	Tools               []Tool
	AddGenerationPrompt bool
	BOSToken, EOSToken  string
	// EnableThinking defaults to true, as in llama-server. Templates read their
	// own switches (Kimi K3: "thinking") from Kwargs.
	EnableThinking *bool
	// Kwargs are the request's chat_template_kwargs: extra template variables.
	Kwargs map[string]json.RawMessage
	// Now dates the datetime/date_string variables; zero means time.Now().
	Now time.Time
	// Continue, when set, leaves the last message (an assistant's) open for
	// the model to continue instead of starting a new one; the generation
	// prompt is then not added (see Template.Render).
	Continue Continue
}

// orderedObject is a JSON object that keeps insertion order and lets a later
// set replace a key in place, as nlohmann's ordered_json does.
type orderedObject struct {
	keys []string
	vals map[string]json.RawMessage
}

func (o *orderedObject) set(key string, v any) error {
	raw, ok := v.(json.RawMessage)
	if !ok {
		b, err := marshalNoEscape(v)
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		raw = b
	}
	if o.vals == nil {
		o.vals = map[string]json.RawMessage{}
	}
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = raw
	return nil
}

func (o *orderedObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := marshalNoEscape(k)
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(o.vals[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshalNoEscape is json.Marshal without HTML escaping, so '<|open|>' in a
// message stays readable in the context JSON.
func marshalNoEscape(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// buildContext lays out the template variables the way llama.cpp's
// common_chat_template_direct_apply does: messages, bos_token, eos_token,
// enable_thinking, tools, datetime, date_string, the kwargs, then
// add_generation_prompt (only when true).
func (t *Template) buildContext(in Input) ([]byte, error) {
	msgs, err := t.messagesJSON(in.Messages)
	if err != nil {
		return nil, err
	}
	var ctx orderedObject
	thinking := in.EnableThinking == nil || *in.EnableThinking
	now := in.Now
	if now.IsZero() {
		now = time.Now()
	}
	steps := []struct {
		key string
		v   any
	}{
		{"messages", msgs},
		{"bos_token", in.BOSToken},
		{"eos_token", in.EOSToken},
		{"enable_thinking", thinking},
	}
	for _, s := range steps {
		if err := ctx.set(s.key, s.v); err != nil {
			return nil, err
		}
	}
	if len(in.Tools) > 0 {
		tools, err := toolsJSON(in.Tools)
		if err != nil {
			return nil, err
		}
		if err := ctx.set("tools", tools); err != nil {
			return nil, err
		}
	}
	_ = ctx.set("datetime", now.Format("Jan 02 2006"))
	_ = ctx.set("date_string", now.Format("02 Jan 2006"))
	keys := make([]string, 0, len(in.Kwargs))
	for k := range in.Kwargs {
		keys = append(keys, k)
	}
	sort.Strings(keys) // llama.cpp keeps kwargs in a std::map
	for _, k := range keys {
		raw := in.Kwargs[k]
		if !json.Valid(raw) {
			return nil, fmt.Errorf("chat: chat_template_kwargs %q: not valid JSON", k)
		}
		_ = ctx.set(k, json.RawMessage(raw))
	}
	if in.AddGenerationPrompt {
		_ = ctx.set("add_generation_prompt", true)
	}
	applyAliases(&ctx)
	return ctx.MarshalJSON()
}

// applyAliases mirrors llama.cpp's caps_apply_*: a reasoning effort or
// preserve-reasoning switch is offered under each name templates use for it.
func applyAliases(ctx *orderedObject) {
	if raw, ok := ctx.vals["reasoning_effort"]; ok {
		var s string
		if json.Unmarshal(raw, &s) == nil && s != "" {
			_ = ctx.set("reasoning_strength", raw)
		}
	}
	if raw, ok := ctx.vals["preserve_reasoning"]; ok {
		var on bool
		if json.Unmarshal(raw, &on) == nil {
			_ = ctx.set("preserve_thinking", on)
			_ = ctx.set("clear_thinking", !on)
			_ = ctx.set("truncate_history_thinking", !on)
			_ = ctx.set("drop_thinking", !on)
		}
	}
}

func toolsJSON(tools []Tool) (json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(tools))
	for i, tl := range tools {
		params := tl.Parameters
		if len(bytes.TrimSpace(params)) == 0 {
			params = json.RawMessage("{}")
		}
		if !json.Valid(params) {
			return nil, fmt.Errorf("chat: tool %d (%q): parameters are not valid JSON", i, tl.Name)
		}
		var fn orderedObject
		_ = fn.set("name", tl.Name)
		_ = fn.set("description", tl.Description)
		_ = fn.set("parameters", json.RawMessage(params))
		var obj orderedObject
		_ = obj.set("type", "function")
		fb, _ := fn.MarshalJSON()
		_ = obj.set("function", json.RawMessage(fb))
		ob, _ := obj.MarshalJSON()
		out = append(out, ob)
	}
	return marshalNoEscape(out)
}

// messagesJSON turns messages into what llama.cpp hands the template
// (common_chat_msg::to_json_oaicompat plus the workarounds chat.cpp applies):
// developer becomes system, content becomes a string or typed parts as the
// template expects, and tool-call arguments become objects when the template
// reads them as a mapping.
func (t *Template) messagesJSON(msgs []Message) (json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(msgs))
	for i, m := range msgs {
		var o orderedObject
		role := m.Role
		if role == "developer" && !strings.Contains(t.src, "<|channel|>") {
			role = "system"
		}
		_ = o.set("role", role)
		if err := o.set("content", t.content(m)); err != nil {
			return nil, err
		}
		if m.ReasoningContent != "" {
			_ = o.set("reasoning_content", m.ReasoningContent)
		}
		if m.Name != "" {
			_ = o.set("name", m.Name)
		}
		if m.ToolCallID != "" {
			_ = o.set("tool_call_id", m.ToolCallID)
		}
		if len(m.ToolCalls) > 0 {
			calls, err := t.toolCallsJSON(m.ToolCalls)
			if err != nil {
				return nil, fmt.Errorf("chat: message %d: %w", i, err)
			}
			_ = o.set("tool_calls", calls)
		}
		b, _ := o.MarshalJSON()
		out = append(out, b)
	}
	return marshalNoEscape(out)
}

func (t *Template) content(m Message) any {
	if m.Parts == nil {
		if t.caps.TypedContent && !t.caps.StringContent {
			return []ContentPart{{Type: "text", Text: m.Content}}
		}
		return m.Content
	}
	var text []ContentPart
	for _, p := range m.Parts {
		if p.Type == "text" {
			text = append(text, p)
		}
	}
	if t.caps.StringContent && !t.caps.TypedContent {
		parts := make([]string, len(text))
		for i, p := range text {
			parts[i] = p.Text
		}
		return strings.Join(parts, "\n")
	}
	if text == nil {
		text = []ContentPart{}
	}
	return text
}

func (t *Template) toolCallsJSON(calls []ToolCall) (json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(calls))
	for j, c := range calls {
		var args any = c.Function.Arguments
		if t.caps.ObjectArguments {
			// like llama.cpp, "" is not JSON either: a call without arguments
			// sends "{}"
			a := strings.TrimSpace(c.Function.Arguments)
			if !json.Valid([]byte(a)) {
				return nil, fmt.Errorf("tool call %d (%q): arguments are not valid JSON", j, c.Function.Name)
			}
			args = json.RawMessage(a)
		}
		var fn orderedObject
		_ = fn.set("name", c.Function.Name)
		if err := fn.set("arguments", args); err != nil {
			return nil, err
		}
		var o orderedObject
		_ = o.set("type", "function")
		fb, _ := fn.MarshalJSON()
		_ = o.set("function", json.RawMessage(fb))
		if c.ID != "" {
			_ = o.set("id", c.ID)
		}
		b, _ := o.MarshalJSON()
		out = append(out, b)
	}
	return marshalNoEscape(out)
}
