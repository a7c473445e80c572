package gguf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/tools/parity"
)

// k3Stricter lists the malformed cases ggml's reader accepts and k3 rejects
// on purpose, with the reason.
var k3Stricter = map[string]string{
	"zero dim":     "ggml allows empty tensors; no model has one and k3 treats it as corruption",
	"empty name":   "ggml allows an empty tensor name; no model has one",
	"outside file": "gguf_init_from_file without data does not check; llama.cpp's loader does, later",
}

// TestParityRejects checks that every file k3 rejects is rejected by ggml
// too, except where k3 is stricter on purpose.
func TestParityRejects(t *testing.T) {
	r := parity.Require(t)
	dir := t.TempDir()
	for _, c := range malformedCases() {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.gguf")
			if err := os.WriteFile(path, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := r.Meta(path)
			why, stricter := k3Stricter[c.name]
			switch {
			case err == nil && !stricter:
				t.Errorf("ggml reads a file k3 rejects with %q", c.want)
			case err != nil && stricter:
				t.Errorf("ggml rejects it too (%v); drop it from k3Stricter (%s)", err, why)
			}
		})
	}
}
