package synth

import (
	"fmt"
	"strings"
)

// TokenUserDefined is llama_token_type USER_DEFINED: an added token that
// is not special in the HF tokenizer (Qwen's <tool_call>, <think>, ...);
// llama.cpp matches it in text like a control token but prints it.
const TokenUserDefined = 4

// qwenSpecials are Qwen2.5/Qwen3's added tokens in id order, right after
// the normal tokens (151643.. in the released vocabulary), with whether
// the HF tokenizer marks them special (control) or not (user-defined).
var qwenSpecials = []struct {
	text    string
	control bool
}{
	{"<|endoftext|>", true}, {"<|im_start|>", true}, {"<|im_end|>", true},
	{"<|object_ref_start|>", true}, {"<|object_ref_end|>", true}, {"<|box_start|>", true}, {"<|box_end|>", true},
	{"<|quad_start|>", true}, {"<|quad_end|>", true}, {"<|vision_start|>", true}, {"<|vision_end|>", true},
	{"<|vision_pad|>", true}, {"<|image_pad|>", true}, {"<|video_pad|>", true},
	{"<tool_call>", false}, {"</tool_call>", false},
	{"<|fim_prefix|>", false}, {"<|fim_middle|>", false}, {"<|fim_suffix|>", false}, {"<|fim_pad|>", false},
	{"<|repo_name|>", false}, {"<|file_sep|>", false},
	{"<tool_response>", false}, {"</tool_response>", false}, {"<think>", false}, {"</think>", false},
}

// qwenSpecialBase is the id of <|endoftext|> in the released vocabulary.
const qwenSpecialBase = 151643

// newQwenVocab builds a byte-level BPE vocabulary of n tokens laid out as
// Qwen's: normal tokens, the added tokens, then unused padding up to n
// (151936 in the release). A vocabulary too small for that puts the added
// tokens last. bos and padding are <|endoftext|>, eos <|im_end|>, as in
// the released GGUF files.
func newQwenVocab(n int) (*Vocab, error) {
	if n < minVocab256(len(qwenSpecials)) {
		return nil, fmt.Errorf("synth: vocabulary of %d is below the minimum %d", n, minVocab256(len(qwenSpecials)))
	}
	base := n - len(qwenSpecials)
	if n >= qwenSpecialBase+len(qwenSpecials) {
		base = qwenSpecialBase
	}
	v := &Vocab{Tokens: make([]string, 0, n), Types: make([]int32, 0, n)}
	b2u := byteToUnicode()
	seen := map[string]bool{}
	for b := range 256 {
		v.Tokens = append(v.Tokens, b2u[b])
		v.Types = append(v.Types, TokenNormal)
		seen[b2u[b]] = true
	}
	for _, m := range learnedMerges() {
		joined := strings.Replace(m, " ", "", 1)
		if !seen[joined] && len(v.Tokens) == base {
			break
		}
		v.Merges = append(v.Merges, m)
		if !seen[joined] {
			seen[joined] = true
			v.Tokens = append(v.Tokens, joined)
			v.Types = append(v.Types, TokenNormal)
		}
	}
	for i := len(v.Tokens); i < base; i++ {
		v.Tokens = append(v.Tokens, fmt.Sprintf("[PAD%d]", i))
		v.Types = append(v.Types, TokenUnused)
	}
	for _, s := range qwenSpecials {
		v.Tokens = append(v.Tokens, s.text)
		if s.control {
			v.Types = append(v.Types, TokenControl)
		} else {
			v.Types = append(v.Types, TokenUserDefined)
		}
	}
	for i := len(v.Tokens); i < n; i++ {
		v.Tokens = append(v.Tokens, fmt.Sprintf("[PAD%d]", i))
		v.Types = append(v.Types, TokenUnused)
	}
	v.BOS, v.EOS, v.PAD = uint32(base), uint32(base+2), uint32(base)
	return v, nil
}
