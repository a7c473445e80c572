// Package server is the Echo HTTP server: the OpenAI-compatible API, SSE
// streaming, /metrics and the embedded web chat page.
//
// Routes (llama-server's shapes where OpenAI defines none):
//
//	POST /v1/chat/completions   chat, whole or streamed (SSE), tools, reasoning
//	POST /v1/completions        raw prompt (text or token ids), whole or streamed
//	POST /v1/responses          OpenAI's Responses API: items, tools, reasoning items,
//	                            stream events, previous_response_id (kept in memory, LRU)
//	POST /v1/messages           Anthropic's Messages API: blocks, tools, thinking, stream
//	                            events, errors in Anthropic's shape; .../count_tokens
//	GET  /v1/models             the served model
//	GET  /health                200 once the model is loaded, 503 before or while degraded
//	POST /tokenize, /detokenize llama-server's token routes
//	GET  /metrics               Prometheus text (k3_* counters and gauges)
//	GET  /status                JSON for the page's status bar
//	GET  /status/history        a sample a second of the last ten minutes
//	GET  /                      the chat page (web/, embedded)
//	GET  /stats.html            live charts: decode rate, disk throughput,
//	                            hit rate, wait share, memory over time
//
// The model side is a Backend (package local runs one in process). The
// server owns validation, queueing (one generation at a time, a bounded
// queue, 429 past it), stop strings and reply parsing (core/chat), and
// errors in OpenAI's {"error":{"message","type","code"}} shape. The
// Responses and Messages APIs are translations onto the chat path
// (prepareChat, runChat): one template, tool forcing, sampling and parser.
// The API key is taken as a bearer token or, as llama-server does, from
// x-api-key (Anthropic's clients send it so).
//
// Constrained output (constrain.go) is a grammar (core/grammar) applied
// through the engine's mask: response_format json_object/json_schema,
// the Responses API's text.format and llama-server's json_schema and
// grammar fields; with tools, each call's arguments are held to its
// tool's parameter schema (chat.ReplyGrammar writes the template's reply
// format around them). A schema or grammar that cannot be enforced is a
// 400 naming where. Log-probabilities (probs.go) are the log-softmax of
// the raw logits, recorded by one mask that runs before any grammar:
// chat logprobs/top_logprobs, completions logprobs and echo, and
// /completion's n_probs.
//
// A server without an API key is meant for its own machine: bodies must be
// sent as JSON (415 otherwise) and the Host header must name the server
// (403 otherwise, see Options.AllowedHosts), so a web page the user visits
// cannot drive it. A 5xx says what failed and gives the request id
// (X-Request-Id); the details, which can name files, go to the log only.
package server
