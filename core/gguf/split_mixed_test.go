package gguf_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/synth"
)

// TestSplitMixedModels: two synthetic models that differ only in their
// seed have the same tensor names, shapes, types and offsets; a shard of
// one put into the other's set must be refused, naming that shard.
func TestSplitMixedModels(t *testing.T) {
	cfg, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	split := synth.WriteOptions{Split: gguf.SplitOptions{MaxTensors: 30}}
	a := filepath.Join(t.TempDir(), "tiny")
	resA, err := synth.Write(a, cfg, split)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Seed = 2
	resB, err := synth.Write(filepath.Join(t.TempDir(), "tiny"), cfg, split)
	if err != nil {
		t.Fatal(err)
	}
	if len(resA.Paths) < 3 || len(resA.Paths) != len(resB.Paths) {
		t.Fatalf("%d and %d shards", len(resA.Paths), len(resB.Paths))
	}
	f, err := gguf.Open(resA.Paths[0])
	if err != nil {
		t.Fatalf("the unmixed set: %v", err)
	}
	f.Close()
	odd := resA.Paths[2]
	b, err := os.ReadFile(resB.Paths[2])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(odd, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err = gguf.Open(resA.Paths[0])
	if err == nil {
		f.Close()
		t.Fatal("a set with another model's shard opened")
	}
	if msg := err.Error(); !strings.Contains(msg, odd+": ") || !strings.Contains(msg, `"general.uuid"`) || !strings.Contains(msg, "another model") {
		t.Errorf("error %q does not name %s and what differs", msg, odd)
	}
}
