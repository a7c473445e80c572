package main

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestServeFlags(t *testing.T) {
	tests := []struct {
		args []string
		want map[string]any
		bad  bool
	}{
		{[]string{"-m", "x.gguf"}, map[string]any{}, false},
		{[]string{"-m", "x.gguf", "--host", "0.0.0.0", "--port", "9000", "-t", "4", "-c", "8192", "-b", "1024", "-ub", "256",
			"--cpilot-memory", "55G", "--api-key", "k", "--alias", "kimi", "--shutdown-grace", "30s"},
			map[string]any{"server.host": "0.0.0.0", "server.port": 9000, "threads": 4, "context": 8192, "batch": 1024,
				"ubatch": 256, "memory.budget": "55G", "server.api_key": "k", "server.alias": "kimi", "server.shutdown_grace": "30s"}, false},
		{[]string{"--model", "x.gguf", "--ctx-size", "100", "--threads", "2", "--host", "/tmp/k3.sock"},
			map[string]any{"context": 100, "threads": 2, "server.host": "/tmp/k3.sock"}, false},
		{[]string{"-m", "x.gguf", "--allowed-hosts", "k3.lan,box"}, map[string]any{"server.allowed_hosts": "k3.lan,box"}, false},
		{[]string{"-m", "x.gguf", "--port", "eighty"}, nil, true},
	}
	for _, tt := range tests {
		fs, a := newServeFlags(&bytes.Buffer{})
		if err := fs.Parse(tt.args); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		got, err := setFlags(fs, a.values)
		if (err != nil) != tt.bad {
			t.Errorf("%v: error %v", tt.args, err)
			continue
		}
		if !tt.bad {
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("%v (-want +got):\n%s", tt.args, d)
			}
		}
	}
}

func TestServeNeedsModel(t *testing.T) {
	var stderr bytes.Buffer
	if err := runServe(nil, &bytes.Buffer{}, &stderr); !errors.Is(err, errUsage) {
		t.Errorf("no -m: %v", err)
	}
	if !bytes.Contains(stderr.Bytes(), []byte("--demo")) {
		t.Errorf("usage does not mention --demo: %s", stderr.String())
	}
}
