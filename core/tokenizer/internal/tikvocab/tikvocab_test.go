package tikvocab

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLoadJSTiktoken(t *testing.T) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	body := `module.exports = {"pat_str":"x","special_tokens":{},"bpe_ranks":"! 0 ` + b64("a") + " " + b64("b") +
		`\n! 3 ` + b64("ab") + `"};`
	path := filepath.Join(t.TempDir(), "r.cjs")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LoadJSTiktoken(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Ranks{[]byte("a"), []byte("b"), nil, []byte("ab")}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := os.WriteFile(path, []byte(`{"bpe_ranks":"! x YQ=="}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadJSTiktoken(path); err == nil || !strings.Contains(err.Error(), "bad rank") {
		t.Errorf("bad rank: err = %v", err)
	}
}

// TestVocabMerges checks the merge derivation against a hand-worked table:
// "abc" replays to ab+c (abc's own rank is not below itself), and "bc",
// ranked after "abc", replays to b+c.
func TestVocabMerges(t *testing.T) {
	r := Ranks{[]byte("a"), []byte("b"), []byte("c"), []byte(" "), []byte("ab"), []byte("abc"), []byte("bc"), nil, []byte(" a")}
	v := r.Vocab([]Special{{Text: "<|end|>", Type: 3}}, 12)
	wantTokens := []string{"a", "b", "c", "Ġ", "ab", "abc", "bc", "[PAD7]", "Ġa", "<|end|>", "[PAD10]", "[PAD11]"}
	if diff := cmp.Diff(wantTokens, v.Tokens); diff != "" {
		t.Errorf("tokens (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a b", "ab c", "b c", "Ġ a"}, v.Merges); diff != "" {
		t.Errorf("merges (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int32{1, 1, 1, 1, 1, 1, 1, 5, 1, 3, 5, 5}, v.Types); diff != "" {
		t.Errorf("types (-want +got):\n%s", diff)
	}
}
