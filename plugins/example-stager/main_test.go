package main

import (
	"bytes"
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/plugin/plugintest"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAsExternalPlugin builds this directory into a binary and drives it
// exactly as k3 drives a plugin a profile names by path.
func TestAsExternalPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "example-stager")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(1, 3, m.Layers, m.Experts, m.TopK, 1.0)
	var logs syncBuffer
	sup, err := host.SuperviseStager(ctx, host.Launch{Name: "example", Path: bin, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(ctx)
	r, _, err := plugintest.NewRunner(ctx, sup, m, m.Request(1<<30, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Run(ctx, tr); err != nil {
		t.Fatal(err)
	}
	plugintest.MustEqual(t, "example vs files", plugintest.Reference(t, m, tr), r.Digest())
	if !strings.Contains(logs.String(), "example stager open") || !strings.Contains(logs.String(), "plugin=example") {
		t.Errorf("plugin log missing from the host's:\n%s", logs.String())
	}
	if _, err := sup.Open(ctx, m.Request(1, "", map[string]string{"x": "y"})); err == nil {
		t.Error("option accepted")
	}
}

// TestInProcess runs the same stager with no IPC.
func TestInProcess(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(1, 3, m.Layers, m.Experts, m.TopK, 1.0)
	s := &stager{}
	r, _, err := plugintest.NewRunner(ctx, s, m, m.Request(1<<30, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer s.Close(ctx)
	if err := r.Run(ctx, tr); err != nil {
		t.Fatal(err)
	}
	plugintest.MustEqual(t, "in-process", plugintest.Reference(t, m, tr), r.Digest())
}
