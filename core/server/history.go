package server

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// The live-charts page (web/stats.html) draws the server's recent past
// from /status/history: one sample a second, the last ten minutes, kept
// by the server so a page opened mid-run sees what came before it.
const (
	historyInterval = time.Second
	historyLen      = 600
)

// Sample is the server's cumulative counters and gauges at one moment; the
// page turns consecutive samples into rates (tokens/s, disk bytes/s, hit
// rate and wait share over the interval).
type Sample struct {
	UnixMilli int64 `json:"t"`
	// Tokens counts generated tokens as they are sent (live, unlike the
	// per-request totals of /metrics, which move when a request ends).
	Tokens       int64 `json:"tokens"`
	PromptTokens int64 `json:"prompt_tokens"` // evaluated, cached excluded, at request end
	Running      int   `json:"running"`
	Waiting      int   `json:"waiting"`
	// Engine counters (zero on a backend that has none).
	BytesRead     int64   `json:"storage_read_bytes"`
	StorageWait   float64 `json:"storage_wait_seconds"`
	CacheHits     int64   `json:"expert_cache_hits"`
	CacheMisses   int64   `json:"expert_cache_misses"`
	ResidentBytes int64   `json:"resident_bytes"`
	BudgetBytes   int64   `json:"memory_budget_bytes"`
}

// history is a fixed ring of samples.
type history struct {
	mu      sync.Mutex
	samples []Sample // oldest first once full: ring[next:] then ring[:next]
	next    int
}

func (h *history) add(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) < historyLen {
		h.samples = append(h.samples, s)
		return
	}
	h.samples[h.next] = s
	h.next = (h.next + 1) % historyLen
}

// since returns the samples newer than t (Unix ms), oldest first.
func (h *history) since(t int64) []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Sample, 0, len(h.samples))
	for i := range h.samples {
		s := h.samples[(h.next+i)%len(h.samples)]
		if s.UnixMilli > t {
			out = append(out, s)
		}
	}
	return out
}

// sample reads the counters now.
func (s *Server) sample() Sample {
	m := s.metrics.snapshot()
	running, waiting := s.queue.counts()
	x := Sample{UnixMilli: time.Now().UnixMilli(), Tokens: s.metrics.emitted.Load(), PromptTokens: m.promptTokens,
		Running: running, Waiting: waiting}
	if b, _ := s.ready(); b != nil {
		st := b.Stats()
		x.BytesRead, x.StorageWait, x.CacheHits, x.CacheMisses = st.BytesRead, st.StorageWaitSeconds, st.CacheHits, st.CacheMisses
		x.ResidentBytes, x.BudgetBytes = st.ResidentBytes, st.BudgetBytes
	}
	return x
}

// recordHistory samples every interval until ctx ends.
func (s *Server) recordHistory(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	s.history.add(s.sample())
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.history.add(s.sample())
		}
	}
}

// serveHistory answers GET /status/history[?since=UNIX_MS] with the kept
// samples (newer than since) and a fresh one last, so two samples are
// there to draw from even on a page opened in the server's first second.
func (s *Server) serveHistory(c echo.Context) error {
	var since int64
	if v := c.QueryParam("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return errInvalid("since must be a time in Unix milliseconds, got " + strconv.Quote(v))
		}
		since = n
	}
	out := append(s.history.since(since), s.sample())
	return c.JSON(http.StatusOK, map[string]any{"interval_ms": historyInterval.Milliseconds(), "samples": out})
}
