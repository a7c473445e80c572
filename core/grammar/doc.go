// Package grammar constrains sampling to a formal language: GBNF grammars
// (llama.cpp's format, grammars/README.md there) parsed into rules, a
// Matcher that follows the text generated so far through them with a set
// of pushdown stacks, and per-step token masks over a whole vocabulary.
// FromJSONSchema converts a JSON Schema into a grammar, with the rules and
// the supported keywords of llama.cpp's common/json-schema-to-grammar.
//
// Tokens are byte strings (their text with control tokens shown). A
// Vocab sorts them once so that a mask is one walk over the sorted list in
// which tokens sharing a prefix share its work and a dead prefix skips all
// the tokens that start with it; the Matcher memoizes its stack-set
// transitions and the masks of the states it has seen, so text inside a
// JSON string, where the state repeats, costs a cache lookup per token.
package grammar
