// Package server is the Echo HTTP server: the OpenAI-compatible API, SSE
// streaming, /metrics and the embedded web chat page.
package server
