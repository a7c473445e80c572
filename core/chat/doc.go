// Package chat renders a model's tokenizer.chat_template (Jinja) with the
// variables llama.cpp passes, and parses generated text back into OpenAI
// fields (reasoning, content, tool calls).
package chat
