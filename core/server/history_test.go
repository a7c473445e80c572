package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/server"
)

type historyJSON struct {
	IntervalMs int64 `json:"interval_ms"`
	Samples    []struct {
		T           int64 `json:"t"`
		Tokens      int64 `json:"tokens"`
		Prompt      int64 `json:"prompt_tokens"`
		BytesRead   int64 `json:"storage_read_bytes"`
		Resident    int64 `json:"resident_bytes"`
		Budget      int64 `json:"memory_budget_bytes"`
		CacheHits   int64 `json:"expert_cache_hits"`
		CacheMisses int64 `json:"expert_cache_misses"`
	} `json:"samples"`
}

func getHistory(t *testing.T, url string) (int, historyJSON, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var h historyJSON
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return resp.StatusCode, h, string(b)
}

// TestStatusHistory: the server samples its counters every second while it
// serves; /status/history returns them oldest first with a fresh sample
// last, counts generated tokens as they are sent, filters by since, and
// refuses a since that is not a number.
func TestStatusHistory(t *testing.T) {
	ls := serveStoppable(t, server.Options{})
	code, h0, body := getHistory(t, ls.url+"/status/history")
	if code != 200 || len(h0.Samples) == 0 || h0.IntervalMs != 1000 {
		t.Fatalf("history at start: %d %s", code, body)
	}
	const n = 12
	resp, err := http.Post(ls.url+"/v1/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":%d,"ignore_eos":true,"temperature":0}`, n)))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	time.Sleep(1100 * time.Millisecond) // let the sampler tick once after the request

	_, h, body := getHistory(t, ls.url+"/status/history")
	if len(h.Samples) < 2 {
		t.Fatalf("want at least the first tick and a fresh sample: %s", body)
	}
	for i := 1; i < len(h.Samples); i++ {
		a, b := h.Samples[i-1], h.Samples[i]
		if b.T < a.T || b.Tokens < a.Tokens || b.Prompt < a.Prompt {
			t.Fatalf("samples out of order or counters going back at %d: %s", i, body)
		}
	}
	last := h.Samples[len(h.Samples)-1]
	if got := last.Tokens - h0.Samples[len(h0.Samples)-1].Tokens; got != n {
		t.Errorf("tokens counted %d, want %d", got, n)
	}
	if last.Prompt == 0 || last.Resident <= 0 || last.Budget <= 0 {
		t.Errorf("last sample lacks prompt tokens, resident or budget: %+v", last)
	}

	_, hs, _ := getHistory(t, fmt.Sprintf("%s/status/history?since=%d", ls.url, last.T))
	for _, s := range hs.Samples[:len(hs.Samples)-1] {
		if s.T <= last.T {
			t.Errorf("since=%d returned a sample at %d", last.T, s.T)
		}
	}
	if code, _, body := getHistory(t, ls.url+"/status/history?since=yesterday"); code != 400 || !strings.Contains(body, "since") {
		t.Errorf("bad since: %d %s", code, body)
	}
}

// TestStatsPage: the live-charts page and its script are served with the
// chat page's headers, and the chat page links to it.
func TestStatsPage(t *testing.T) {
	ts := newTestServer(t, server.Options{APIKey: "secret"})
	for path, want := range map[string]string{"/stats.html": "text/html", "/stats.js": "text/javascript"} {
		code, hdr, b := ts.do(t, "GET", path, "")
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), want) || hdr.Get("Content-Security-Policy") == "" {
			t.Errorf("%s: %d %q", path, code, hdr.Get("Content-Type"))
		}
		if path == "/stats.html" && !strings.Contains(string(b), `src="stats.js"`) {
			t.Errorf("stats.html does not load its script")
		}
	}
	if _, _, b := ts.do(t, "GET", "/", ""); !strings.Contains(string(b), `href="stats.html"`) {
		t.Error("the chat page does not link the charts")
	}
	if code, _, _ := ts.do(t, "GET", "/status/history", ""); code != 401 {
		t.Errorf("/status/history without the key: %d, want 401", code)
	}
}
