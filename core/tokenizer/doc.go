// Package tokenizer builds the BPE tokenizer that llama.cpp derives from GGUF
// metadata (tokenizer.ggml.*), with native pre-tokenizers (kimi-k2, llama3,
// qwen2, deepseek-v3), special-token parsing and streaming detokenization.
package tokenizer
