package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/server/local"
	"github.com/k3-inference/k3/core/synth"
)

// The tests run the real backend on the tiny synthetic kimi-k3 model:
// random weights, but the real tokenizer, chat template, forward pass and
// sampler. It is written once per test binary.
var (
	modelOnce sync.Once
	modelPath string
	modelErr  error
	modelDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if modelDir != "" {
		os.RemoveAll(modelDir)
	}
	os.Exit(code)
}

func tinyModel(t testing.TB) string {
	t.Helper()
	modelOnce.Do(func() {
		modelDir, modelErr = os.MkdirTemp("", "k3-server-test")
		if modelErr != nil {
			return
		}
		cfg, _ := synth.Preset("tiny")
		cfg.Type = synth.TypeQ2_K
		modelPath = filepath.Join(modelDir, "tiny.gguf")
		_, modelErr = synth.Write(modelPath, cfg, synth.WriteOptions{})
	})
	if modelErr != nil {
		t.Fatalf("writing the tiny model: %v", modelErr)
	}
	return modelPath
}

var (
	backendOnce sync.Once
	sharedBE    *local.Backend
	backendErr  error
)

// tinyBackend is shared by the tests: loading is the slow part, and the
// backend serialises generations itself.
func tinyBackend(t testing.TB) *local.Backend {
	t.Helper()
	path := tinyModel(t)
	backendOnce.Do(func() {
		sharedBE, backendErr = local.Open(path, local.Options{Threads: 2, Context: 2048, Budget: 1 << 30})
	})
	if backendErr != nil {
		t.Fatalf("opening the tiny model: %v", backendErr)
	}
	return sharedBE
}

type testServer struct {
	*httptest.Server
	srv *server.Server
	log *syncWriter
}

func newTestServer(t *testing.T, o server.Options) *testServer {
	t.Helper()
	be := tinyBackend(t)
	logs := &syncWriter{}
	o.RequestLog = logs
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := server.New(o, be)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return &testServer{Server: ts, srv: s, log: logs}
}

// syncWriter collects log output written from server goroutines.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// do sends a raw request as JSON and returns status, headers and body.
func (ts *testServer) do(t *testing.T, method, path, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	return ts.send(t, method, path, "", body, append([]string{"Content-Type", "application/json"}, hdr...)...)
}

// apiErr is the error body every failure must have.
type apiErr struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	} `json:"error"`
}

func decodeErr(t *testing.T, body []byte) apiErr {
	t.Helper()
	var e apiErr
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("not an OpenAI-style error body (%v): %s", err, body)
	}
	return e
}

// sseEvents reads a stream's data payloads up to and including [DONE].
func sseEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("unexpected SSE line %q", line)
		}
		out = append(out, data)
		if data == "[DONE]" {
			break
		}
	}
	return out
}
