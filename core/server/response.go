package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// usage is OpenAI's token accounting.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func usageOf(r GenerateResult) *usage {
	u := &usage{PromptTokens: r.PromptTokens, CompletionTokens: r.GeneratedTokens, TotalTokens: r.PromptTokens + r.GeneratedTokens}
	u.PromptTokensDetails.CachedTokens = r.CachedTokens
	return u
}

// timings is llama-server's per-request timing object.
type timings struct {
	CacheN              int     `json:"cache_n"`
	PromptN             int     `json:"prompt_n"`
	PromptMS            float64 `json:"prompt_ms"`
	PromptPerTokenMS    float64 `json:"prompt_per_token_ms"`
	PromptPerSecond     float64 `json:"prompt_per_second"`
	PredictedN          int     `json:"predicted_n"`
	PredictedMS         float64 `json:"predicted_ms"`
	PredictedPerTokenMS float64 `json:"predicted_per_token_ms"`
	PredictedPerSecond  float64 `json:"predicted_per_second"`
}

func timingsOf(r GenerateResult) *timings {
	pn := r.PromptTokens - r.CachedTokens
	pms := float64(r.PromptTime.Microseconds()) / 1000
	gms := float64(r.GenTime.Microseconds()) / 1000
	return &timings{
		CacheN: r.CachedTokens, PromptN: pn, PromptMS: pms, PromptPerTokenMS: perToken(pms, pn), PromptPerSecond: perSecond(pms, pn),
		PredictedN: r.GeneratedTokens, PredictedMS: gms,
		PredictedPerTokenMS: perToken(gms, r.GeneratedTokens), PredictedPerSecond: perSecond(gms, r.GeneratedTokens),
	}
}

func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// sse writes a Server-Sent Events stream. Each write gets its own deadline,
// so a client that stops reading is dropped (and its generation cancelled)
// without bounding how long a healthy stream may last.
type sse struct {
	c       echo.Context
	rc      *http.ResponseController
	timeout time.Duration
}

func (s *Server) startSSE(c echo.Context) *sse {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	c.Response().WriteHeader(http.StatusOK)
	w := &sse{c: c, rc: http.NewResponseController(c.Response()), timeout: s.opts.WriteTimeout}
	_ = w.rc.Flush()
	return w
}

func (w *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("sse: encode: %w", err)
	}
	return w.raw("data: " + string(b) + "\n\n")
}

func (w *sse) raw(s string) error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	if _, err := w.c.Response().Write([]byte(s)); err != nil {
		return errClientGone
	}
	if err := w.rc.Flush(); err != nil {
		return errClientGone
	}
	return nil
}

// sendError reports an error that happens after the stream started, the
// way llama-server does: as a data event holding the error object.
func (w *sse) sendError(e *apiError) {
	_ = w.send(map[string]*apiError{"error": e})
}

// writeJSON sends a whole response under the write deadline.
func (s *Server) writeJSON(c echo.Context, v any) error {
	_ = http.NewResponseController(c.Response()).SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	return c.JSON(http.StatusOK, v)
}
