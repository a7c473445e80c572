// Package tokenizer builds the BPE tokenizer that llama.cpp derives from GGUF
// metadata (tokenizer.ggml.*), with native pre-tokenizers (kimi-k2, llama3,
// qwen2, deepseek-v3), special-token parsing and streaming detokenization.
//
// The reference is llama.cpp's behaviour, quirks included: the pre-tokenizers
// follow its hand-written scanners (or, for deepseek-v3, what std::regex does
// on its collapsed text), invalid UTF-8 becomes U+FFFD before BPE, special
// tokens are cut out longest first, CONTROL tokens are recognised only when
// asked while USER_DEFINED ones always are, and detokenizing applies the same
// space clean-up for the vocabularies that enable it. The parity tests
// compare token ids, pieces and detokenized text with llama.cpp on the same
// GGUF files.
//
// Build a Tokenizer with FromGGUF, or with New from plain Go values.
package tokenizer
