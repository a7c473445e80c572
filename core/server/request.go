package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/k3-inference/k3/core/chat"
)

// samplingFields are the sampling settings shared by both completion routes,
// with llama-server's names. Pointers tell "absent" from zero.
type samplingFields struct {
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	NPredict            *int            `json:"n_predict"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	RepeatPenalty       *float64        `json:"repeat_penalty"`
	RepeatLastN         *int            `json:"repeat_last_n"`
	Seed                *int64          `json:"seed"`
	Stop                stopList        `json:"stop"`
	LogitBias           logitBias       `json:"logit_bias"`
	N                   *int            `json:"n"`
	NCmpl               *int            `json:"n_cmpl"` // llama-server's name for n; it wins over n
	IgnoreEOS           bool            `json:"ignore_eos"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	User                json.RawMessage `json:"user"`
	// JSONSchema and Grammar are llama-server's constraints on the
	// generated text: a JSON Schema, or GBNF.
	JSONSchema json.RawMessage `json:"json_schema"`
	Grammar    *string         `json:"grammar"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	samplingFields
	Tools              []toolDecl                 `json:"tools"`
	ToolChoice         json.RawMessage            `json:"tool_choice"`
	ChatTemplateKwargs map[string]json.RawMessage `json:"chat_template_kwargs"`
	// AddGenerationPrompt (default true) and ContinueFinalMessage are
	// llama-server's; the latter is a boolean or "auto"/"content".
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage json.RawMessage `json:"continue_final_message"`
	// ResponseFormat is OpenAI's {type: text | json_object | json_schema}.
	ResponseFormat json.RawMessage `json:"response_format"`
	Logprobs       *bool           `json:"logprobs"`
	TopLogprobs    *int            `json:"top_logprobs"`
	// ReasoningFormat is llama-server's: "none" leaves the reasoning in the
	// content; "auto" and "deepseek" (the default) split it out.
	ReasoningFormat string `json:"reasoning_format"`
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	Model  string `json:"model"`
	Prompt prompt `json:"prompt"`
	samplingFields
	// Logprobs is how many alternatives to report per token (OpenAI's
	// legacy completions form); Echo puts the prompt before the text.
	Logprobs *int `json:"logprobs"`
	Echo     bool `json:"echo"`
}

// chatMessage accepts content as a string, null or an array of parts.
type chatMessage struct {
	Role             string          `json:"role"`
	Content          content         `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
	Name             string          `json:"name"`
	ToolCallID       string          `json:"tool_call_id"`
	ToolCalls        []chat.ToolCall `json:"tool_calls"`
}

type content struct {
	Text  string
	Parts []chat.ContentPart
	isSet bool
}

func (c *content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '"':
		c.isSet = true
		return json.Unmarshal(b, &c.Text)
	case len(b) > 0 && b[0] == '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		c.isSet = true
		c.Parts = []chat.ContentPart{}
		for i, p := range parts {
			if p.Type == "" {
				return fmt.Errorf("content part %d has no type", i)
			}
			if p.Type == "text" {
				if p.Text == nil {
					return fmt.Errorf("content part %d of type text has no text", i)
				}
				c.Parts = append(c.Parts, chat.ContentPart{Type: "text", Text: *p.Text})
			}
		}
		return nil
	}
	return errors.New("content must be a string, an array of content parts or null")
}

// stopList accepts a string, an array of strings or null.
type stopList []string

func (s *stopList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("stop must be a string or an array of strings")
	}
	*s = many
	return nil
}

// logitBias accepts OpenAI's {"token id": bias} object and llama-server's
// [[id, bias], ...] array, where a bias of false bans the token.
type logitBias map[int32]float32

func (l *logitBias) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	out := logitBias{}
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '{':
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		for k, v := range m {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil {
				return fmt.Errorf("logit_bias key %q is not a token id", k)
			}
			bias, err := biasValue(v)
			if err != nil {
				return fmt.Errorf("logit_bias[%q]: %w", k, err)
			}
			out[int32(id)] = bias
		}
	case len(b) > 0 && b[0] == '[':
		var pairs [][2]json.RawMessage
		if err := json.Unmarshal(b, &pairs); err != nil {
			return errors.New("logit_bias array must hold [token id, bias] pairs")
		}
		for i, p := range pairs {
			var id int32
			if err := json.Unmarshal(p[0], &id); err != nil {
				return fmt.Errorf("logit_bias[%d]: token id must be an integer", i)
			}
			bias, err := biasValue(p[1])
			if err != nil {
				return fmt.Errorf("logit_bias[%d]: %w", i, err)
			}
			out[id] = bias
		}
	default:
		return errors.New("logit_bias must be an object or an array of pairs")
	}
	*l = out
	return nil
}

func biasValue(v json.RawMessage) (float32, error) {
	if bytes.Equal(bytes.TrimSpace(v), []byte("false")) {
		return float32(math.Inf(-1)), nil
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		return 0, errors.New("bias must be a number or false")
	}
	return float32(f), nil
}

// prompt accepts a string, an array of token ids, or a one-element array of
// either (the batch form, with a single prompt).
type prompt struct {
	Text   string
	Tokens []int32
	isSet  bool
}

func (p *prompt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		p.isSet = true
		return json.Unmarshal(b, &p.Text)
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(b, &arr); err != nil {
		return errors.New("prompt must be a string or an array of token ids")
	}
	if len(arr) == 1 {
		if t := bytes.TrimSpace(arr[0]); len(t) > 0 && (t[0] == '"' || t[0] == '[') {
			return p.UnmarshalJSON(t)
		}
	}
	p.isSet = true
	p.Tokens = make([]int32, 0, len(arr))
	for i, v := range arr {
		var id int32
		if err := json.Unmarshal(v, &id); err != nil {
			return fmt.Errorf("prompt[%d] is not a token id (only one prompt per request is supported)", i)
		}
		p.Tokens = append(p.Tokens, id)
	}
	return nil
}

// toolDecl is one entry of tools.
type toolDecl struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// decodeJSON decodes a request body strictly enough to report errors that
// name the field, and never accepts trailing garbage.
func decodeJSON(body []byte, dst any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return errBadRequest("request body is empty")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(dst); err != nil {
		return jsonError(body, err)
	}
	if dec.More() {
		return errBadRequest("request body has data after the JSON object")
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); err == nil {
		return errBadRequest("request body has data after the JSON object")
	}
	return nil
}

func jsonError(body []byte, err error) *apiError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return errBadRequest(fmt.Sprintf("malformed JSON at byte %d: %v", syn.Offset, syn))
	case errors.As(err, &typ):
		path := jsonPath(body, typ.Offset)
		if path == "" {
			return errBadRequest(fmt.Sprintf("request body must be a JSON object, not %s", valueName(typ.Value)))
		}
		return errBadRequest(fmt.Sprintf("%s: expected %s, got %s", path, typeName(typ.Type.Kind().String()), valueName(typ.Value)))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errBadRequest("malformed JSON: unexpected end of input")
	}
	return errBadRequest("invalid request body: " + strings.TrimPrefix(err.Error(), "json: "))
}

// jsonPath names, as messages[1].role, the value of a JSON document that
// ends at byte offset end, or that is an array or object opening there
// (where encoding/json reports a type mismatch). Go's own
// UnmarshalTypeError.Field names Go structs and drops array indexes.
func jsonPath(body []byte, end int64) string {
	type level struct {
		array bool
		index int    // next element's index
		key   string // current member's name
		inKey bool   // the next string token is a member name
	}
	var stack []level
	name := func() string {
		var b strings.Builder
		for _, l := range stack {
			switch {
			case l.array:
				fmt.Fprintf(&b, "[%d]", l.index-1)
			case b.Len() == 0:
				b.WriteString(l.key)
			default:
				b.WriteString("." + l.key)
			}
		}
		return b.String()
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if n := len(stack); n > 0 {
			top := &stack[n-1]
			if !top.array && top.inKey {
				if d, ok := tok.(json.Delim); ok && d == '}' {
					stack = stack[:n-1]
					continue
				}
				top.key, top.inKey = fmt.Sprint(tok), false
				continue
			}
			if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
				stack = stack[:n-1]
				continue
			}
			if top.array {
				top.index++
			} else {
				top.inKey = true
			}
		}
		if dec.InputOffset() == end {
			return name()
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, level{inKey: true})
		case json.Delim('['):
			stack = append(stack, level{array: true})
		}
	}
}

// valueName is encoding/json's description of a value ("string", "number
// 1.5") as a phrase.
func valueName(v string) string {
	switch v {
	case "string":
		return "a string"
	case "number":
		return "a number"
	case "bool":
		return "a boolean"
	case "array":
		return "an array"
	case "object":
		return "an object"
	}
	if n, ok := strings.CutPrefix(v, "number "); ok {
		return "the number " + n
	}
	return v
}

func typeName(kind string) string {
	switch kind {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return kind
}
