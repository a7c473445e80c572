package server

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k3-inference/k3/core/buildinfo"
	"github.com/labstack/echo/v4"
)

// metrics are the server's cumulative counters.
type metrics struct {
	mu            sync.Mutex
	requests      int64 // generations finished, whatever the outcome
	cancelled     int64 // of those, ended by the client leaving
	promptTokens  int64 // prompt tokens evaluated (cached ones excluded)
	cachedTokens  int64
	promptSeconds float64
	genTokens     int64
	genSeconds    float64
	last          GenerateResult // the latest finished generation
	// emitted counts generated tokens as they are sent, for the live
	// charts; the fields above move when a request ends.
	emitted atomic.Int64
}

func (m *metrics) record(r GenerateResult, cancelled bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests++
	if cancelled {
		m.cancelled++
	}
	m.promptTokens += int64(r.PromptTokens - r.CachedTokens)
	m.cachedTokens += int64(r.CachedTokens)
	m.promptSeconds += r.PromptTime.Seconds()
	m.genTokens += int64(r.GeneratedTokens)
	m.genSeconds += r.GenTime.Seconds()
	m.last = r
}

func (m *metrics) snapshot() metrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	return metrics{requests: m.requests, cancelled: m.cancelled, promptTokens: m.promptTokens,
		cachedTokens: m.cachedTokens, promptSeconds: m.promptSeconds, genTokens: m.genTokens,
		genSeconds: m.genSeconds, last: m.last}
}

// retryAfter guesses how many seconds a rejected client should wait: the
// mean generation time so far, at least one second.
func (m *metrics) retryAfter() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.requests == 0 {
		return 1
	}
	return int((m.promptSeconds+m.genSeconds)/float64(m.requests)) + 1
}

func rate(n int64, s float64) float64 {
	if s <= 0 {
		return 0
	}
	return float64(n) / s
}

// serveMetrics writes Prometheus text format, with llama-server's metric
// names under the k3_ prefix plus the engine's storage counters.
func (s *Server) serveMetrics(c echo.Context) error {
	m := s.metrics.snapshot()
	running, waiting := s.queue.counts()
	var st EngineStats
	if b, _ := s.ready(); b != nil {
		st = b.Stats()
	}
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "text/plain; version=0.0.4; charset=utf-8")
	w.Header().Set("Process-Start-Time-Unix", strconv.FormatInt(s.started.Unix(), 10)) // llama-server's
	w.WriteHeader(http.StatusOK)
	for _, x := range []struct {
		name, kind, help string
		v                float64
	}{
		{"prompt_tokens_total", "counter", "Prompt tokens evaluated (reused prefix tokens excluded).", float64(m.promptTokens)},
		{"prompt_tokens_cached_total", "counter", "Prompt tokens reused from the previous sequence.", float64(m.cachedTokens)},
		{"prompt_seconds_total", "counter", "Time spent evaluating prompts.", m.promptSeconds},
		{"tokens_predicted_total", "counter", "Tokens generated.", float64(m.genTokens)},
		{"tokens_predicted_seconds_total", "counter", "Time spent generating.", m.genSeconds},
		{"prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.", rate(m.promptTokens, m.promptSeconds)},
		{"predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.", rate(m.genTokens, m.genSeconds)},
		{"requests_total", "counter", "Generations finished (any outcome).", float64(m.requests)},
		{"requests_cancelled_total", "counter", "Generations ended because the client left.", float64(m.cancelled)},
		{"requests_processing", "gauge", "Requests running on the engine.", float64(running)},
		{"requests_deferred", "gauge", "Requests waiting for the engine.", float64(waiting)},
		{"requests_rejected_total", "counter", "Requests turned away because the queue was full (429).", float64(s.queue.rejections())},
		{"expert_cache_hits_total", "counter", "Expert-cache hits.", float64(st.CacheHits)},
		{"expert_cache_misses_total", "counter", "Expert-cache misses.", float64(st.CacheMisses)},
		{"storage_read_bytes_total", "counter", "Bytes read from storage.", float64(st.BytesRead)},
		{"storage_wait_seconds_total", "counter", "Time compute waited on storage.", st.StorageWaitSeconds},
		{"resident_bytes", "gauge", "Resident memory in bytes.", float64(st.ResidentBytes)},
		{"memory_budget_bytes", "gauge", "Memory budget in bytes.", float64(st.BudgetBytes)},
	} {
		if err := writeMetric(w, "k3_"+x.name, x.kind, x.help, x.v); err != nil {
			return nil // the client left; nothing to report to it
		}
	}
	bi := buildinfo.Get()
	fmt.Fprintf(w, "# HELP k3_build_info The running build (core/buildinfo); always 1.\n# TYPE k3_build_info gauge\n"+
		"k3_build_info{version=%q,revision=%q,go=%q} 1\n", bi.Version, bi.ShortRevision(), bi.Go)
	return nil
}

func writeMetric(w io.Writer, name, kind, help string, v float64) error {
	_, err := fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %g\n", name, help, name, kind, name, v)
	return err
}

// statusJSON is what the web page's status bar shows.
type statusJSON struct {
	Ready           bool    `json:"ready"`
	Model           string  `json:"model,omitempty"`
	ContextLength   int     `json:"context_length,omitempty"`
	UptimeSeconds   float64 `json:"uptime_seconds"`
	Running         int     `json:"requests_processing"`
	Waiting         int     `json:"requests_deferred"`
	Requests        int64   `json:"requests_total"`
	PrefillPerSec   float64 `json:"prefill_tokens_per_second"`
	DecodePerSec    float64 `json:"decode_tokens_per_second"`
	LastPrefillRate float64 `json:"last_prefill_tokens_per_second"`
	LastDecodeRate  float64 `json:"last_decode_tokens_per_second"`
	CacheHits       int64   `json:"expert_cache_hits"`
	CacheMisses     int64   `json:"expert_cache_misses"`
	CacheHitRate    float64 `json:"expert_cache_hit_rate"`
	BytesRead       int64   `json:"storage_read_bytes"`
	StorageWait     float64 `json:"storage_wait_seconds"`
	ResidentBytes   int64   `json:"resident_bytes"`
	BudgetBytes     int64   `json:"memory_budget_bytes"`
}

func (s *Server) status(c echo.Context) error {
	m := s.metrics.snapshot()
	running, waiting := s.queue.counts()
	st := statusJSON{UptimeSeconds: time.Since(s.started).Seconds(), Running: running, Waiting: waiting,
		Requests: m.requests, PrefillPerSec: rate(m.promptTokens, m.promptSeconds), DecodePerSec: rate(m.genTokens, m.genSeconds),
		LastPrefillRate: rate(int64(m.last.PromptTokens-m.last.CachedTokens), m.last.PromptTime.Seconds()),
		LastDecodeRate:  rate(int64(m.last.GeneratedTokens), m.last.GenTime.Seconds())}
	if b, _ := s.ready(); b != nil {
		es := b.Stats()
		st.Ready, st.Model, st.ContextLength = true, s.modelID(b), b.ModelInfo().ContextLength
		st.CacheHits, st.CacheMisses, st.BytesRead, st.StorageWait = es.CacheHits, es.CacheMisses, es.BytesRead, es.StorageWaitSeconds
		st.ResidentBytes, st.BudgetBytes = es.ResidentBytes, es.BudgetBytes
		if n := es.CacheHits + es.CacheMisses; n > 0 {
			st.CacheHitRate = float64(es.CacheHits) / float64(n)
		}
	}
	return c.JSON(http.StatusOK, st)
}
