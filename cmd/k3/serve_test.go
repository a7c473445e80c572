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
		// llama-server's flags (issue 19): request defaults, CORS, template
		// file, -np; --jinja and --metrics are accepted and set nothing.
		{[]string{"-m", "x.gguf", "--temp", "0.2", "--seed", "7", "-n", "64", "--cors-origins", "https://a.example", "--jinja", "--metrics",
			"--chat-template-file", "t.jinja", "-np", "1", "-b", "32"},
			map[string]any{"server.temperature": "0.2", "server.seed": 7, "server.n_predict": 64, "server.cors_origins": "https://a.example",
				"server.chat_template_file": "t.jinja", "server.parallel": 1, "batch": 32}, false},
		{[]string{"-m", "x.gguf", "--no-slots"}, map[string]any{"server.slots": false}, false},
		{[]string{"-m", "x.gguf", "--slots"}, map[string]any{"server.slots": true}, false},
		{[]string{"-m", "x.gguf", "--no-prefill-assistant"}, map[string]any{"server.prefill_assistant": false}, false},
		{[]string{"-m", "x.gguf", "--prefill-assistant"}, map[string]any{"server.prefill_assistant": true}, false},
		{[]string{"-m", "x.gguf", "-s", "3", "--n-predict", "5", "--parallel", "2", "--temperature", "1"},
			map[string]any{"server.seed": 3, "server.n_predict": 5, "server.parallel": 2, "server.temperature": "1"}, false},
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

// TestServeUnknownFlagFails: a flag k3 does not know still stops it, loudly.
func TestServeUnknownFlagFails(t *testing.T) {
	var stderr bytes.Buffer
	if err := runServe([]string{"-m", "x.gguf", "--flash-attn-nonsense"}, &bytes.Buffer{}, &stderr); err == nil {
		t.Fatal("unknown flag accepted")
	}
	if !bytes.Contains(stderr.Bytes(), []byte("flash-attn-nonsense")) {
		t.Errorf("stderr does not name the flag: %s", stderr.String())
	}
}

// TestServeParallelRefused: -np 0 fails before loading, naming the key.
func TestServeParallelRefused(t *testing.T) {
	err := runServe([]string{"-m", "x.gguf", "--profile", "auto", "-np", "0"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("server.parallel")) {
		t.Fatalf("err = %v", err)
	}
}

// TestServeChatTemplateFileMissing: a template file that cannot be read
// fails at start, naming the flag.
func TestServeChatTemplateFileMissing(t *testing.T) {
	err := runServe([]string{"-m", "x.gguf", "--profile", "auto", "--chat-template-file", "/nonexistent/t.jinja"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("--chat-template-file")) {
		t.Fatalf("err = %v", err)
	}
}
