// Package chat renders a model's tokenizer.chat_template (Jinja, through
// github.com/ardanlabs/jinja) with the variables llama.cpp passes, and parses
// generated text back into OpenAI fields (reasoning, content, tool calls),
// whole or streamed. The Kimi K3 tagged format is the one parser so far.
//
// Parity: tools/jinja-ref renders the same inputs with llama.cpp's own
// common_chat_templates_apply / common_chat_parse and with @huggingface/jinja.
package chat
