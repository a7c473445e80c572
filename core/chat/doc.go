// Package chat renders a model's tokenizer.chat_template (Jinja, through
// github.com/ardanlabs/jinja) with the variables llama.cpp passes, and parses
// generated text back into OpenAI fields (reasoning, content, tool calls),
// whole or streamed, in the template's reply format (DetectFormat): Kimi K3's
// tagged format with k3's own parser (parse.go), and Kimi K2's, DeepSeek
// V3.1's and R1's, Qwen3/Hermes's and Qwen3-Coder's (and Qwen3.5's) with the
// parsers llama.cpp builds for them, on a PEG engine of llama.cpp's semantics
// (peg.go, format_llama.go, format_qwen3coder.go). Each format
// also writes the forced opening of a call (ForcedCall) and its reply
// grammar (ReplyGrammar).
//
// Parity: tools/jinja-ref renders the same inputs with llama.cpp's own
// common_chat_templates_apply / common_chat_parse and with @huggingface/jinja.
package chat
