package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/grammar"
)

// grammarVocab is the backend's vocabulary as grammars see it (token
// texts with control tokens shown), indexed once.
func (s *Server) grammarVocab() *grammar.Vocab {
	box := s.backend.Load()
	if box == nil {
		return nil
	}
	texts := s.tokenTexts()
	box.vocabOnce.Do(func() { box.vocab = grammar.NewVocab(texts, box.b.ModelInfo().EOG) })
	return box.vocab
}

// grammarMask constrains sampling to g: from the first token, or, when
// trigger is set, from just after the first place the generated text
// holds it (until then nothing is constrained). A matcher that rejects a
// token (the mask was overruled: nothing it allowed could be sampled)
// stops constraining.
func grammarMask(v *grammar.Vocab, g *grammar.Grammar, trigger string) func(generated []int32, logits []float32) {
	m := grammar.NewMatcher(g, v)
	seen := 0
	active := trigger == ""
	var text []byte
	return func(generated []int32, logits []float32) {
		for ; seen < len(generated); seen++ {
			t := generated[seen]
			if active {
				_ = m.Accept(t)
				continue
			}
			from := max(0, len(text)-len(trigger)+1) // earlier text was searched
			text = append(text, v.Piece(t)...)
			if i := bytes.Index(text[from:], []byte(trigger)); i >= 0 {
				active = true
				_ = m.AcceptString(string(text[from+i+len(trigger):]))
			}
		}
		if active && m.Err() == nil {
			m.Mask(logits)
		}
	}
}

// chainMasks runs masks in order; nil ones are skipped.
func chainMasks(masks ...func([]int32, []float32)) func([]int32, []float32) {
	var fs []func([]int32, []float32)
	for _, f := range masks {
		if f != nil {
			fs = append(fs, f)
		}
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(generated []int32, logits []float32) {
		for _, f := range fs {
			f(generated, logits)
		}
	}
}

func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// textGrammar is llama-server's grammar or json_schema field as a grammar
// over the whole generated text (nil when neither is set).
func textGrammar(f *samplingFields) (*grammar.Grammar, *apiError) {
	hasSchema := present(f.JSONSchema)
	if hasSchema && f.Grammar != nil && *f.Grammar != "" {
		return nil, errInvalid("Cannot use both json_schema and grammar")
	}
	var src string
	switch {
	case hasSchema:
		var err error
		if src, err = grammar.FromJSONSchema(f.JSONSchema); err != nil {
			return nil, errInvalid("json_schema: " + err.Error())
		}
	case f.Grammar != nil && *f.Grammar != "":
		src = *f.Grammar
	default:
		return nil, nil
	}
	g, err := grammar.Parse(src, grammar.Options{})
	if err != nil {
		return nil, errInvalid(err.Error())
	}
	return g, nil
}

// responseSchema is the schema a chat reply's content must match, from
// response_format (OpenAI) or json_schema (llama-server); nil when the
// content is free.
func responseSchema(req *chatRequest) ([]byte, *apiError) {
	if !present(req.ResponseFormat) {
		if present(req.JSONSchema) {
			return req.JSONSchema, nil
		}
		return nil, nil
	}
	var rf struct {
		Type       string          `json:"type"`
		Schema     json.RawMessage `json:"schema"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(req.ResponseFormat, &rf); err != nil {
		return nil, errInvalid("response_format must be an object with a type")
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		if present(rf.Schema) { // llama-server's extension
			return rf.Schema, nil
		}
		return []byte(`{"type":"object"}`), nil
	case "json_schema":
		if rf.JSONSchema == nil || !present(rf.JSONSchema.Schema) {
			return nil, errInvalid("response_format.json_schema.schema is required for type json_schema")
		}
		return rf.JSONSchema.Schema, nil
	}
	return nil, errInvalid(`response_format.type must be "text", "json_object" or "json_schema", not "` + rf.Type + `"`)
}

// chatConstraint is the mask that holds a chat reply to its request:
// llama-server's grammar over the raw reply, else the content schema
// and the tools' parameter schemas in the template's reply format.
func (s *Server) chatConstraint(req *chatRequest, popts chat.ParseOptions, force toolForce) (func([]int32, []float32), *apiError) {
	if req.Grammar != nil && *req.Grammar != "" {
		if present(req.ResponseFormat) || present(req.JSONSchema) {
			return nil, errInvalid("Cannot use grammar together with response_format or json_schema")
		}
		g, err := grammar.Parse(*req.Grammar, grammar.Options{})
		if err != nil {
			return nil, errInvalid(err.Error())
		}
		return grammarMask(s.grammarVocab(), g, ""), nil
	}
	content, aerr := responseSchema(req)
	if aerr != nil {
		return nil, aerr
	}
	c := chat.Constraint{Content: content, Tools: len(popts.Tools) > 0, Force: force.call, ForceName: force.name}
	if c.Content == nil && !c.Tools {
		return nil, nil
	}
	src, trigger, err := chat.ReplyGrammar(popts, c)
	if err != nil {
		msg := err.Error()
		var se *grammar.SchemaError
		if errors.As(err, &se) && strings.HasPrefix(msg, "tool ") {
			msg = "tools: " + msg
		}
		return nil, errInvalid(msg)
	}
	g, err := grammar.Parse(src, grammar.Options{})
	if err != nil {
		return nil, newAPIError(http.StatusInternalServerError, "server_error", "reply grammar: "+err.Error())
	}
	return grammarMask(s.grammarVocab(), g, trigger), nil
}

// constrainText applies llama-server's grammar or json_schema to a raw
// completion: after the job's other masks (probabilities are reported
// before the grammar masks), with control tokens rendered as their text,
// which is what the grammar matched.
func (s *Server) constrainText(j *job, f *samplingFields) *apiError {
	g, aerr := textGrammar(f)
	if aerr != nil || g == nil {
		return aerr
	}
	j.mask = chainMasks(j.mask, grammarMask(s.grammarVocab(), g, ""))
	j.special = true
	return nil
}
