package server_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/server"
)

// serveReal runs the server on a real listener (the timeouts live in the
// http.Server that Serve builds, which httptest does not use).
func serveReal(t *testing.T, o server.Options) (net.Addr, *syncWriter) {
	t.Helper()
	logs := &syncWriter{}
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	o.RequestLog = io.Discard
	s := server.New(o, tinyBackend(t))
	ln, err := s.Listen()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr(), logs
}

func TestUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "k3s")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "k3.sock")
	serveReal(t, server.Options{Host: sock})
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://k3/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("health over %s: %d", sock, resp.StatusCode)
	}
}

func TestNonLoopbackWarning(t *testing.T) {
	for _, tt := range []struct {
		host, key string
		warn      bool
	}{
		{"127.0.0.1", "", false},
		{"0.0.0.0", "", true},
		{"0.0.0.0", "k", false},
	} {
		_, logs := serveReal(t, server.Options{Host: tt.host, APIKey: tt.key})
		if got := strings.Contains(logs.String(), "without --api-key"); got != tt.warn {
			t.Errorf("host %s key %q: warning %v, want %v:\n%s", tt.host, tt.key, got, tt.warn, logs)
		}
	}
}

// TestSlowClients: a client that sends its headers or body too slowly is
// cut off after ReadTimeout instead of holding a connection forever.
func TestSlowClients(t *testing.T) {
	addr, _ := serveReal(t, server.Options{ReadTimeout: 300 * time.Millisecond})
	for _, tt := range []struct{ name, send string }{
		{"slow headers", "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"},
		{"slow body", "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\":"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr.String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if _, err := conn.Write([]byte(tt.send)); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			r := bufio.NewReader(conn)
			line, err := r.ReadString('\n')
			if err != nil && err != io.EOF {
				t.Fatalf("no answer and no close: %v", err)
			}
			if line != "" && !strings.Contains(line, " 400 ") && !strings.Contains(line, " 408 ") {
				t.Errorf("answer %q", line)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("cut off after %v", d)
			}
		})
	}
	// The server still serves others.
	resp, err := http.Get("http://" + addr.String() + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health after slow clients: %v %v", err, resp)
	}
	resp.Body.Close()
}

// TestLongStreamOutlivesReadTimeout: the read deadline that bounds a slow
// request body must not cancel a generation that runs longer than it.
func TestLongStreamOutlivesReadTimeout(t *testing.T) {
	addr, _ := serveReal(t, server.Options{ReadTimeout: 200 * time.Millisecond})
	text, finish, tokens, err := streamText(context.Background(), "http://"+addr.String(),
		`{"prompt":"long","max_tokens":120,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`)
	if err != nil || finish != "length" || tokens != 120 {
		t.Errorf("finish %q after %d tokens (%v); text %q", finish, tokens, err, text)
	}
}
