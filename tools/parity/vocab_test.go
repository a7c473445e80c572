package parity

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTokenizeVocabFiles runs llama.cpp's own tokenizer test cases
// (models/ggml-vocab-*.gguf.inp/.out, checked by its test-tokenizer-0 with
// add_special and parse_special off) through the harness.
func TestTokenizeVocabFiles(t *testing.T) {
	r := Require(t)
	src := RequireSource(t)
	for _, name := range []string{"llama-spm", "gpt-2", "qwen2"} {
		t.Run(name, func(t *testing.T) {
			model := filepath.Join(src, "models", "ggml-vocab-"+name+".gguf")
			inp, err := os.ReadFile(model + ".inp")
			if err != nil {
				t.Fatal(err)
			}
			out, err := os.ReadFile(model + ".out")
			if err != nil {
				t.Fatal(err)
			}
			const sep = "\n__ggml_vocab_test__\n"
			// As test-tokenizer-0 splits: a trailing separator ends the list.
			texts := strings.Split(strings.TrimSuffix(string(inp), sep), sep)
			wants := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(texts) != len(wants) || len(texts) < 10 {
				t.Fatalf("%d inputs, %d outputs", len(texts), len(wants))
			}
			in := make([][]byte, len(texts))
			for i, text := range texts {
				in[i] = []byte(text)
			}
			got, err := r.TokenizeAll(model, in, false, false)
			if err != nil {
				t.Fatal(err)
			}
			for i, text := range texts {
				want := []int32{}
				for _, f := range strings.Fields(wants[i]) {
					id, err := strconv.ParseInt(f, 10, 32)
					if err != nil {
						t.Fatalf("case %d: %v", i, err)
					}
					want = append(want, int32(id))
				}
				if d := cmp.Diff(want, got[i]); d != "" {
					t.Errorf("case %d %q (-want +got):\n%s", i, text, d)
				}
			}
			// Tokenize and TokenizeAll are one code path in k3ref; check they agree.
			one, err := r.Tokenize(model, in[len(in)-1], false, false)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(got[len(got)-1], one); d != "" {
				t.Errorf("Tokenize and TokenizeAll differ (-all +one):\n%s", d)
			}
		})
	}
}
