package synth_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/k3-inference/k3/core/synth"
)

// A test that needs a kimi-k3 model writes the tiny preset: a few MB,
// deterministic from the seed, loadable by llama.cpp.
func ExampleWrite() {
	dir, err := os.MkdirTemp("", "synth")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	cfg, _ := synth.Preset("tiny")
	cfg.Type = synth.TypeQ2_K
	res, err := synth.Write(filepath.Join(dir, "tiny.gguf"), cfg, synth.WriteOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(res.Paths), res.Tensors)
	// Output: 1 102
}
