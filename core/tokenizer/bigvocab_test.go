package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/tokenizer/internal/tikvocab"
)

// The large test vocabulary is o200k_base (199998 ranked tokens, from the
// js-tiktoken npm package) with merges derived the way llama.cpp's Kimi
// converter derives them, plus Kimi-style special tokens. It is generated
// on first use into a cache directory, never committed.

// bigVocabVersion changes whenever the generated files would change.
const bigVocabVersion = 1

// bigSpecials extends kimiSpecials with tokens that exercise more paths.
var bigSpecials = append(append([]struct {
	text string
	typ  TokenType
}{}, kimiSpecials...), []struct {
	text string
	typ  TokenType
}{
	{"<|tool_calls_section_begin|>", TypeControl}, {"<|tool_calls_section_end|>", TypeControl},
	{"<|tool_call_begin|>", TypeControl}, {"<|tool_call_argument_begin|>", TypeControl},
	{"<|tool_call_end|>", TypeControl}, {"<|open|>", TypeControl}, {"<|close|>", TypeControl},
	{"<|sep|>", TypeControl}, {"<|kimi_image_placeholder|>", TypeControl}, {"[UNK]", TypeUnknown},
	{"[PAD]", TypeControl}, {"<|reserved_token_100|>", TypeControl}, {"<tool>", TypeUserDefined},
}...)

// caseSep is a user-defined token of the big vocabulary: llama.cpp splits
// text at it even when special tokens are not parsed, so one call can
// tokenize many independent cases.
const caseSep = "<|k3_sep|>"

func npmModules() string {
	if d := os.Getenv("K3_TOKENIZER_NPM"); d != "" {
		return d
	}
	return filepath.Join("testdata", "npm", "node_modules")
}

var (
	ranksOnce sync.Once
	ranks     tikvocab.Ranks
	ranksErr  error
)

func loadRanks() (tikvocab.Ranks, error) {
	ranksOnce.Do(func() {
		var p string
		if p, ranksErr = tikvocab.FindJSTiktoken("o200k_base", npmModules()); ranksErr == nil {
			ranks, ranksErr = tikvocab.LoadJSTiktoken(p)
		}
	})
	return ranks, ranksErr
}

var (
	bigOnce sync.Once
	bigBase tikvocab.Vocab
)

// bigVocabConfig gives each pre-tokenizer's variant the special-token
// flags its model family uses.
func bigVocabConfig(pre string, r tikvocab.Ranks) Config {
	bigOnce.Do(func() {
		var sp []tikvocab.Special
		for _, s := range bigSpecials {
			sp = append(sp, tikvocab.Special{Text: s.text, Type: int32(s.typ)})
		}
		bigBase = r.Vocab(sp, (len(r)+len(bigSpecials)+63)/64*64)
	})
	c := Config{Model: "gpt2", Pre: pre, Tokens: bigBase.Tokens, Merges: bigBase.Merges}
	for _, t := range bigBase.Types {
		c.Types = append(c.Types, TokenType(t))
	}
	bos, eos := uint32(len(r)), uint32(len(r)+1) // [BOS], [EOS]
	c.IDs = map[string]uint32{"bos_token_id": bos, "eos_token_id": eos}
	switch pre {
	case "kimi-k2":
		c.Flags = map[string]bool{"add_bos_token": false, "add_eos_token": false}
	case "deepseek-v3":
		c.Flags = map[string]bool{"add_bos_token": true}
	}
	return c
}

func cacheDir() (string, error) {
	if d := os.Getenv("K3_TOKENIZER_CACHE"); d != "" {
		return d, os.MkdirAll(d, 0o755)
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	d = filepath.Join(d, "k3", "tokenizer-test")
	return d, os.MkdirAll(d, 0o755)
}

var bigMu sync.Mutex

// bigVocab returns the path of the o200k-based vocabulary GGUF for pre,
// generating it when the cache lacks it, or skips when the npm package is
// not installed.
func bigVocab(t testing.TB, pre string) string {
	t.Helper()
	bigMu.Lock()
	defer bigMu.Unlock()
	dir, err := cacheDir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("o200k-%s-v%d.gguf", pre, bigVocabVersion))
	if _, err := os.Stat(path); err == nil {
		return path
	}
	r, err := loadRanks()
	if err != nil {
		msg := fmt.Sprintf("large vocabulary unavailable: %v; install it with: npm ci --prefix core/tokenizer/testdata/npm", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg) // CI installs it (.ci/run), so its absence is a failure there
		}
		t.Skip(msg)
	}
	if err := writeVocabGGUF(path, bigVocabConfig(pre, r)); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeVocabGGUF writes a tensor-less GGUF holding only tokenizer metadata,
// which llama.cpp loads with vocab_only.
func writeVocabGGUF(path string, c Config) error {
	kvs := append([]gguf.KV{
		{Key: "general.architecture", Value: gguf.Str("kimi-k3")},
		{Key: "general.name", Value: gguf.Str("k3 tokenizer test vocabulary")},
	}, GGUFKVs(c)...)
	tmp := path + ".tmp" + fmt.Sprint(os.Getpid())
	w, err := gguf.Create(tmp, kvs, nil, gguf.WriteOptions{})
	if err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func loadGGUF(t testing.TB, path string) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tk, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// corpusCase is one independent text of the parity corpus.
type corpusCase struct {
	name string
	text string
}

// corpusCases returns every corpus file whole and each of its lines.
func corpusCases(t testing.TB) []corpusCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "corpus", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files: %v", err)
	}
	var cases []corpusCase
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		cases = append(cases, corpusCase{name, string(b)})
		for i, line := range strings.SplitAfter(string(b), "\n") {
			if line != "" {
				cases = append(cases, corpusCase{fmt.Sprintf("%s:%d", name, i+1), line})
			}
		}
	}
	return cases
}
