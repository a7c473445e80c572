package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/server/local"
)

// liveServer is a server on a real listener whose Serve the test stops.
type liveServer struct {
	url      string
	stop     context.CancelFunc
	done     chan struct{} // closed when Serve returned
	err      error         // what Serve returned
	accepted chan net.Conn // every connection the server accepted
	logs     *syncWriter
}

// acceptLog reports each accepted connection, so that a test knows a
// connection it dialled is the server's before it stops it.
type acceptLog struct {
	net.Listener
	ch chan net.Conn
}

func (l acceptLog) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		select {
		case l.ch <- c:
		default:
		}
	}
	return c, err
}

func serveStoppable(t *testing.T, o server.Options) *liveServer {
	t.Helper()
	return serveBackend(t, o, tinyBackend(t))
}

// serveBackend is serveStoppable over a given backend.
func serveBackend(t *testing.T, o server.Options, be server.Backend) *liveServer {
	t.Helper()
	ls := &liveServer{done: make(chan struct{}), accepted: make(chan net.Conn, 64), logs: &syncWriter{}}
	o.Logger = slog.New(slog.NewTextHandler(ls.logs, nil))
	o.RequestLog = io.Discard
	s := server.New(o, be)
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ls.url = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	ls.stop = cancel
	go func() {
		defer close(ls.done)
		ls.err = s.Serve(ctx, acceptLog{ln, ls.accepted})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-ls.done:
		case <-time.After(time.Minute):
			t.Error("Serve did not return")
		}
	})
	return ls
}

// waitFor polls the server's /metrics until name reads want.
func (ls *liveServer) waitFor(t *testing.T, name string, want float64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		resp, err := http.Get(ls.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if metricValue(t, string(b), name) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %g", name, want)
		}
	}
}

// sseReader reads a stream's data events one at a time.
type sseReader struct{ r *bufio.Reader }

// next returns the next event's data, or io.EOF at a clean end of the body.
func (s sseReader) next() (string, error) {
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			if err == io.EOF && line != "" {
				return "", fmt.Errorf("stream ends inside an event: %q", line)
			}
			return "", err
		}
		line = strings.TrimRight(line, "\n")
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return "", fmt.Errorf("unexpected SSE line %q", line)
		}
		return data, nil
	}
}

// chunk is what the tests read of a stream event.
type chunk struct {
	Choices []struct {
		Text  string
		Delta *struct {
			Content          *string
			ReasoningContent string `json:"reasoning_content"`
		}
		FinishReason *string `json:"finish_reason"`
	}
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	}
	Error *struct {
		Message string
		Type    string
		Code    int
	}
}

// streamEnd is how a stream ended.
type streamEnd struct {
	finish string
	err    *struct {
		Message string
		Type    string
		Code    int
	}
	usage  int  // completion tokens of the usage chunk
	done   bool // "data: [DONE]" came last
	events int
}

// readToEnd reads the rest of a stream to the end of the body: it fails
// the test on a malformed event or a body that does not end cleanly (curl's
// exit 18), and on events after [DONE].
func readToEnd(t *testing.T, r sseReader) streamEnd {
	t.Helper()
	var e streamEnd
	for {
		data, err := r.next()
		if errors.Is(err, io.EOF) {
			return e
		}
		if err != nil {
			t.Fatalf("after %d events: %v", e.events, err)
		}
		if e.done {
			t.Fatalf("event after [DONE]: %s", data)
		}
		e.events++
		if data == "[DONE]" {
			e.done = true
			continue
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %d is not JSON: %s", e.events, data)
		}
		if c.Usage != nil {
			e.usage = c.Usage.CompletionTokens
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				e.finish, e.err = *ch.FinishReason, c.Error
			}
		}
	}
}

// startStream posts a streaming request and reads up to its first
// generated text (or reasoning).
func startStream(t *testing.T, url, path, body string) (sseReader, func()) {
	t.Helper()
	r, closeBody := openStream(t, url, path, body)
	for {
		data, err := r.next()
		if err != nil {
			t.Fatal(err)
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) == 0 {
			continue
		}
		ch := c.Choices[0]
		if ch.Text != "" || ch.Delta != nil && (ch.Delta.ReasoningContent != "" || ch.Delta.Content != nil && *ch.Delta.Content != "") {
			return r, closeBody
		}
	}
}

// openStream posts a streaming request and returns once the server
// answered 200 (the stream's headers are sent before any token).
func openStream(t *testing.T, url, path, body string) (sseReader, func()) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return sseReader{bufio.NewReader(resp.Body)}, func() { resp.Body.Close() }
}

var shutdownStreams = []struct{ name, path, body string }{
	{"completions", "/v1/completions", `{"prompt":"Once upon a time","max_tokens":%d,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`},
	{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Tell a long story"}],"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`},
}

// TestShutdownEndsStreams: with no grace, a running stream is ended at
// once, well-formed: a last chunk with finish_reason "stop" and a 503
// error object saying why, the usage chunk, [DONE], and a body that ends
// cleanly; Serve returns.
func TestShutdownEndsStreams(t *testing.T) {
	for _, tt := range shutdownStreams {
		t.Run(tt.name, func(t *testing.T) {
			ls := serveStoppable(t, server.Options{ShutdownGrace: -1})
			r, closeBody := startStream(t, ls.url, tt.path, fmt.Sprintf(tt.body, 1500))
			defer closeBody()
			ls.stop()
			end := readToEnd(t, r)
			if !end.done || end.finish != "stop" || end.err == nil || end.err.Code != 503 || !strings.Contains(end.err.Message, "shutting down") {
				t.Errorf("stream ended with finish %q, error %+v, [DONE] %v", end.finish, end.err, end.done)
			}
			if end.usage == 0 || end.usage >= 1500 {
				t.Errorf("usage reports %d tokens", end.usage)
			}
			if <-ls.done; ls.err != nil {
				t.Errorf("Serve: %v", ls.err)
			}
			if !strings.Contains(ls.logs.String(), "shutdown grace period over") {
				t.Errorf("no word of the ended requests in the log:\n%s", ls.logs)
			}
		})
	}
}

// TestShutdownEndsWholeRequest: a non-streaming request that shutdown cuts
// short gets a 503 error body, not a partial reply posing as complete.
func TestShutdownEndsWholeRequest(t *testing.T) {
	ls := serveStoppable(t, server.Options{ShutdownGrace: -1})
	type answer struct {
		code int
		body []byte
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.Post(ls.url+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"Once upon a time","max_tokens":1500,"ignore_eos":true}`))
		if err != nil {
			got <- answer{0, []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- answer{resp.StatusCode, b}
	}()
	ls.waitFor(t, "k3_requests_processing", 1)
	ls.stop()
	a := <-got
	if a.code != 503 || !strings.Contains(decodeErr(t, a.body).Error.Message, "stopped before it finished") {
		t.Errorf("cut-short request: %d %s", a.code, a.body)
	}
}

// TestShutdownGrace: within the grace period a running stream completes
// as if nothing happened, while the request waiting behind it for the
// engine and a request that arrives on an open connection during the
// drain get 503 "shutting down"; Serve returns once the stream is done.
func TestShutdownGrace(t *testing.T) {
	for _, tt := range shutdownStreams {
		t.Run(tt.name, func(t *testing.T) {
			const n = 150
			// The stream holds the engine after its first token until the
			// test has seen the queued request deferred and the drain
			// refuse the late one: without the gate a fast machine could
			// finish all n tokens before the queued request arrived.
			gate := &gatedBackend{Backend: tinyBackend(t), release: make(chan struct{}), held: make(chan struct{})}
			ls := serveBackend(t, server.Options{ShutdownGrace: time.Hour}, gate)
			// Not startStream: the first token may show no text yet (a
			// chat parser holds back what may start a tag), and the gate
			// holds the generation right after it.
			r, closeBody := openStream(t, ls.url, tt.path, fmt.Sprintf(tt.body, n))
			defer closeBody()
			<-gate.held

			queued := make(chan []byte, 1)
			go func() {
				resp, err := http.Post(ls.url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"queued","max_tokens":5}`))
				if err != nil {
					queued <- []byte(err.Error())
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				queued <- append([]byte(fmt.Sprint(resp.StatusCode, " ")), b...)
			}()
			ls.waitFor(t, "k3_requests_deferred", 1)

			// A connection the server holds, on which no request came yet.
			for len(ls.accepted) > 0 {
				<-ls.accepted
			}
			late, err := net.Dial("tcp", strings.TrimPrefix(ls.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer late.Close()
			<-ls.accepted

			ls.stop()
			if b := <-queued; !strings.HasPrefix(string(b), "503 ") || !strings.Contains(string(b), "shutting down") {
				t.Errorf("queued request: %s", b)
			}
			body := `{"prompt":"late","max_tokens":5}`
			fmt.Fprintf(late, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			resp, err := http.ReadResponse(bufio.NewReader(late), nil)
			if err != nil {
				t.Fatalf("late request: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 503 || !strings.Contains(decodeErr(t, b).Error.Message, "shutting down") {
				t.Errorf("late request: %d %s", resp.StatusCode, b)
			}

			close(gate.release)
			end := readToEnd(t, r)
			if !end.done || end.finish != "length" || end.err != nil || end.usage != n {
				t.Errorf("stream ended with finish %q after %d tokens, error %+v, [DONE] %v", end.finish, end.usage, end.err, end.done)
			}
			if <-ls.done; ls.err != nil {
				t.Errorf("Serve: %v", ls.err)
			}
		})
	}
}

// TestShutdownGraceFromConfig: a profile's shutdown_grace of 0 means no
// grace, not the Options default.
func TestShutdownGraceFromConfig(t *testing.T) {
	for _, tt := range []struct{ in, want time.Duration }{{0, -1}, {time.Second, time.Second}} {
		if got := server.OptionsFromConfig(config.Profile{Server: config.Server{ShutdownGrace: tt.in}}).ShutdownGrace; got != tt.want {
			t.Errorf("shutdown_grace %v: Options.ShutdownGrace %v, want %v", tt.in, got, tt.want)
		}
	}
}

// gatedBackend holds each generation after its first piece until release
// is closed, so a test can act while a request is known to hold the
// engine.
type gatedBackend struct {
	*local.Backend
	release chan struct{}
	held    chan struct{} // closed when a generation is held (nil: not reported)
}

func (g *gatedBackend) Generate(ctx context.Context, req server.GenerateRequest, emit func(server.Piece) error) (server.GenerateResult, error) {
	first := true
	return g.Backend.Generate(ctx, req, func(p server.Piece) error {
		if err := emit(p); err != nil {
			return err
		}
		if first {
			first = false
			if g.held != nil {
				close(g.held)
			}
			select {
			case <-g.release:
			case <-ctx.Done():
			}
		}
		return nil
	})
}
