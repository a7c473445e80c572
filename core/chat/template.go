package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	src    string
	tmpl   *jinja.Template
	caps   Caps
	format Format
}

// Caps says how a template wants its input, found by rendering probes at load
// time (llama.cpp's jinja::caps_get does the same with usage statistics).
type Caps struct {
	// StringContent: the template prints a plain-string content.
	StringContent bool
	// TypedContent: the template wants content as [{type, text}] parts.
	TypedContent bool
	// ObjectArguments: the template reads tool-call arguments as a mapping, so
	// the JSON text of the API is decoded before rendering.
	ObjectArguments bool
}

// New compiles a chat template (GGUF tokenizer.chat_template) and probes its
// capabilities. A template that does not parse is an error here, never later.
func New(src string) (t *Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("chat: template: engine failure: %v", r)
		}
	}()
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("chat: template: %w", err)
	}
	t = &Template{src: src, tmpl: tmpl, format: DetectFormat(src)}
	t.caps = t.probeCaps()
	return t, nil
}

// Source returns the template text.
func (t *Template) Source() string { return t.src }

// Format is the reply format found in the template's source.
func (t *Template) Format() Format { return t.format }

// Caps returns what the load-time probes found.
func (t *Template) Caps() Caps { return t.caps }

// Render renders the template for in. With in.Continue set, the last
// message is left open for the model to continue (see Continue).
func (t *Template) Render(in Input) (string, error) {
	if in.Continue != ContinueNone {
		prompt, _, err := t.continuation(in)
		return prompt, err
	}
	ctx, err := t.Context(in)
	if err != nil {
		return "", err
	}
	return t.RenderContext(ctx)
}

// Context returns the template variables for in as one JSON object, with keys
// in the order llama.cpp sets them. RenderContext(Context(in)) == Render(in);
// the parity tests hand the same JSON to the reference renderer.
func (t *Template) Context(in Input) ([]byte, error) {
	return t.buildContext(in)
}

// RenderContext renders the template with the variables of a JSON object.
func (t *Template) RenderContext(ctx []byte) (out string, err error) {
	v, err := valueFromJSON(ctx)
	if err != nil {
		return "", fmt.Errorf("chat: context: %w", err)
	}
	if !v.IsDict() {
		return "", errors.New("chat: context: not a JSON object")
	}
	d := v.AsDict()
	vars := extraFilters()
	for _, k := range d.OrderedKeys() {
		vars[k], _ = d.Get(k)
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat: render: engine failure: %v", r)
		}
	}()
	out, err = t.tmpl.RenderValues(vars)
	if err != nil {
		return "", fmt.Errorf("chat: render: %w", err)
	}
	return out, nil
}

// GenerationPrompt is what add_generation_prompt appends for in: the text the
// model's reply continues from (llama.cpp computes it the same way, as the
// difference between the two renderings).
func (t *Template) GenerationPrompt(in Input) (string, error) {
	in.AddGenerationPrompt = false
	without, err := t.Render(in)
	if err != nil {
		return "", err
	}
	in.AddGenerationPrompt = true
	with, err := t.Render(in)
	if err != nil {
		return "", err
	}
	n := 0
	for n < len(without) && n < len(with) && without[n] == with[n] {
		n++
	}
	return with[n:], nil
}

const (
	probeContent = "K3_PROBE_CONTENT"
	probeArg     = "K3_PROBE_ARGUMENT"
)

// probeCaps approximates llama.cpp's capability analysis by rendering: a
// template that fails on, or drops, a plain-string content wants typed parts;
// a template that prints the value of an object argument reads arguments as a
// mapping.
func (t *Template) probeCaps() Caps {
	caps := Caps{StringContent: true}
	render := func(ctx map[string]any) (string, bool) {
		b, err := json.Marshal(ctx)
		if err != nil {
			return "", false
		}
		out, err := t.RenderContext(b)
		return out, err == nil
	}
	base := func(msgs []any) map[string]any {
		return map[string]any{"messages": msgs, "bos_token": "", "eos_token": "", "add_generation_prompt": true}
	}
	out, ok := render(base([]any{map[string]any{"role": "user", "content": probeContent}}))
	if !ok || !strings.Contains(out, probeContent) {
		caps = Caps{TypedContent: true}
	}
	user := map[string]any{"role": "user", "content": "User message"}
	if caps.TypedContent {
		user["content"] = []any{map[string]any{"type": "text", "text": "User message"}}
	}
	call := map[string]any{"id": "call00001", "type": "function", "function": map[string]any{
		"name": "tool1", "arguments": map[string]any{"arg": probeArg},
	}}
	ctx := base([]any{
		user,
		map[string]any{"role": "assistant", "content": "", "tool_calls": []any{call}},
		map[string]any{"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
	})
	ctx["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{
		"name": "tool1", "description": "Tool description",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"arg": map[string]any{"type": "string"}}},
	}}}
	if out, ok := render(ctx); ok && strings.Contains(out, probeArg) {
		caps.ObjectArguments = true
	}
	return caps
}

// ParseOptions returns how to parse the reply to in: the template's format,
// what of the generation prompt the reply continues (whether it opened the
// think section), and the declared tools.
func (t *Template) ParseOptions(in Input) (ParseOptions, error) {
	if in.Continue != ContinueNone {
		_, o, err := t.continuation(in)
		return o, err
	}
	gen, err := t.GenerationPrompt(in)
	if err != nil {
		return ParseOptions{}, err
	}
	return t.format.parseOptions(gen, in.Tools), nil
}
