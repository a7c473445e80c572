package chat

import (
	"errors"
	"strings"
)

// Continue is what continuing a conversation's last message resumes, as
// llama.cpp's continue_final_message (common_chat_continuation).
type Continue int

const (
	// ContinueNone renders the conversation as it is.
	ContinueNone Continue = iota
	// ContinueAuto resumes the reasoning when the last message has
	// reasoning and no content, else the content.
	ContinueAuto
	// ContinueReasoning resumes inside the think section.
	ContinueReasoning
	// ContinueContent resumes inside the response section, after the
	// message's reasoning.
	ContinueContent
)

// ParseContinue reads continue_final_message as llama.cpp does: true is
// auto, "reasoning_content" and "content" name the section, anything else
// (false, null, other strings) is none.
func ParseContinue(v any) Continue {
	switch x := v.(type) {
	case bool:
		if x {
			return ContinueAuto
		}
	case string:
		switch x {
		case "reasoning_content":
			return ContinueReasoning
		case "content":
			return ContinueContent
		}
	}
	return ContinueNone
}

// ErrContinueToolCalls refuses to continue a message that called tools,
// with llama-server's words.
var ErrContinueToolCalls = errors.New("Cannot continue an assistant message that contains tool calls.")

// continuation renders in with its last message, an assistant's, left open
// for the model to continue, as llama.cpp does with a continuation: the
// messages before it rendered without a generation prompt, then the
// generation prompt rebuilt with the message's text in it. For Kimi K3's
// format (common_chat_params_init_kimi_k3) that is the assistant opener,
// the think section with the message's reasoning and, for a content
// continuation, the closed think section, the response opener and the
// content. Other templates get their own generation prompt followed by
// the content; their reasoning sections are unknown here, so only content
// can be continued. It returns the prompt and how to parse what the model
// writes next: only the continuation, starting in the resumed section.
func (t *Template) continuation(in Input) (string, ParseOptions, error) {
	mode := in.Continue
	in.Continue = ContinueNone
	n := len(in.Messages)
	if n == 0 || in.Messages[n-1].Role != "assistant" {
		return "", ParseOptions{}, errors.New("chat: only an assistant message can be continued")
	}
	last := in.Messages[n-1]
	if len(last.ToolCalls) > 0 {
		return "", ParseOptions{}, ErrContinueToolCalls
	}
	content := last.Content
	if last.Parts != nil {
		var texts []string
		for _, p := range last.Parts {
			if p.Type == "text" {
				texts = append(texts, p.Text)
			}
		}
		content = strings.Join(texts, "\n\n")
	}
	if mode == ContinueAuto {
		mode = ContinueContent
		if last.ReasoningContent != "" && content == "" {
			mode = ContinueReasoning
		}
	}
	in.Messages = in.Messages[:n-1]
	gen, err := t.GenerationPrompt(in)
	if err != nil {
		return "", ParseOptions{}, err
	}
	in.AddGenerationPrompt = false
	prompt, err := t.Render(in)
	if err != nil {
		return "", ParseOptions{}, err
	}
	opener := markOpen + `message role="assistant"` + markSep
	if !strings.HasPrefix(gen, opener) {
		if mode == ContinueReasoning {
			return "", ParseOptions{}, errors.New("chat: this template has no reasoning section k3 knows how to continue; continue the content instead")
		}
		// the content goes on: the reply is parsed from outside any section
		return prompt + gen + content, ParseOptions{Format: t.format, Tools: in.Tools}, nil
	}
	gen = opener + markOpen + "think" + markSep + last.ReasoningContent
	if mode == ContinueContent {
		gen += markClose + "think" + markSep + markOpen + "response" + markSep + content
	}
	return prompt + gen, ParseOptions{Format: t.format, Thinking: mode == ContinueReasoning, Tools: in.Tools}, nil
}
