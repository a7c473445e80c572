package chat

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/k3-inference/k3/core/grammar"
)

// Constraint says what a reply must hold: content that is a JSON document
// of a schema, tool calls whose arguments match each tool's parameters,
// or both.
type Constraint struct {
	// Content, when set, is the JSON Schema the reply's content must match.
	Content []byte
	// Tools constrains the arguments of every tool call to the called
	// tool's parameter schema (ParseOptions.Tools).
	Tools bool
	// Force is tool_choice "required" or a named function: the prompt ends
	// with ForcedCall(o, ForceName), and the reply is the rest of the call
	// (and maybe more calls).
	Force     bool
	ForceName string
}

// ReplyGrammar is the GBNF a reply in the format of o must match under
// c (after the prompt and any ForcedCall text), and, when it constrains only what follows a marker (tool calls in a
// reply that may or may not call a tool), that marker: the grammar then
// applies to the text after the first occurrence of trigger. Schema
// errors name the tool or the content they are in.
func ReplyGrammar(o ParseOptions, c Constraint) (gbnf, trigger string, err error) {
	return o.Format.impl().grammar(o, c)
}

func k3ReplyGrammar(o ParseOptions, c Constraint) (gbnf, trigger string, err error) {
	b := grammar.NewSchemaBuilder()
	lit := grammar.Literal
	closeResp, openTools, closeTools := markClose+"response"+markSep, markOpen+"tools"+markSep, markClose+"tools"+markSep
	msgEnd := b.Rule("message-end", "("+lit(markClose+"message"+markSep)+")?")

	var calls string // one call after `<|open|>call tool="`, closed, and any further calls
	if c.Tools || c.Force {
		var alts []string
		for i, t := range o.Tools {
			params := bytes.TrimSpace(t.Parameters)
			if len(params) == 0 || bytes.Equal(params, []byte("null")) {
				params = []byte(`{"type":"object"}`)
			}
			args, err := b.Add(fmt.Sprintf("tool%d-args", i), params)
			if err != nil {
				return "", "", fmt.Errorf("tool %q parameters: %w", t.Name, err)
			}
			name := strings.TrimSuffix(CallNamed(t.Name), `"1"`+markSep)
			block := lit(markOpen+`json type="object"`+markSep) + " " + args + " " + lit(markClose+"json"+markSep)
			alts = append(alts, lit(name)+` "\"" [1-9] [0-9]{0,3} "\"" `+lit(markSep)+" "+block)
			if c.Force && c.ForceName == t.Name {
				// The prompt named it, down to its index: the arguments follow.
				b.Rule("forced", block)
			}
		}
		if len(alts) == 0 {
			return "", "", fmt.Errorf("tool calls are constrained but no tools are declared")
		}
		b.Rule("call", "("+strings.Join(alts, " | ")+") "+lit(markClose+"call"+markSep))
		more := b.Rule("more-calls", "("+lit(markOpen+`call tool="`)+" call)*")
		calls = more + " " + lit(closeTools) + " " + msgEnd
	}

	var reasoning string
	if o.Thinking && !c.Force {
		reasoning = b.Until("reasoning", markClose+"think"+markSep) + " " + lit(markOpen+"response"+markSep) + " "
	}
	switch {
	case c.Force && c.ForceName != "":
		// A named function is called once.
		b.Rule("root", "forced "+lit(markClose+"call"+markSep+closeTools)+" "+msgEnd)
	case c.Force:
		b.Rule("root", "call "+calls)
	case c.Content != nil:
		content, err := b.Add("content", c.Content)
		if err != nil {
			return "", "", fmt.Errorf("response format: %w", err)
		}
		tail := "(" + lit(closeResp) + " " + msgEnd + ")?"
		if c.Tools {
			tools := lit(openTools+markOpen+`call tool="`) + " call " + calls
			tail = "(" + lit(closeResp) + " (" + tools + " | " + msgEnd + "))?"
			b.Rule("root", reasoning+"("+content+" "+tail+" | "+lit(closeResp)+" "+tools+")")
		} else {
			b.Rule("root", reasoning+content+" "+tail)
		}
	case c.Tools:
		// Free text until the model opens a call; from there the call.
		b.Rule("root", "call "+calls)
		return b.String(), markOpen + `call tool="`, nil
	default:
		return "", "", fmt.Errorf("nothing to constrain")
	}
	return b.String(), "", nil
}
