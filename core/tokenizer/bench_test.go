package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
)

func corpusText(b *testing.B) string {
	files, _ := filepath.Glob(filepath.Join("testdata", "corpus", "*"))
	var sb strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		sb.Write(data)
	}
	return sb.String()
}

// benchTokenizer is the o200k kimi-k2 vocabulary when available, else the
// small trained one.
func benchTokenizer(b *testing.B, pre string) *Tokenizer {
	if _, err := loadRanks(); err == nil {
		return loadGGUF(b, bigVocab(b, pre))
	}
	b.Logf("o200k vocabulary unavailable; using the small trained vocabulary")
	return trainedTokenizer(b, pre)
}

// BenchmarkTokenize measures throughput on the whole corpus (~33 KB). The
// word cache stays warm across iterations, as it does in a server.
func BenchmarkTokenize(b *testing.B) {
	text := corpusText(b)
	for _, pre := range []string{"kimi-k2", "deepseek-v3"} {
		b.Run(pre, func(b *testing.B) {
			tk := benchTokenizer(b, pre)
			b.SetBytes(int64(len(text)))
			b.ResetTimer()
			n := 0
			for i := 0; i < b.N; i++ {
				ids, _ := tk.Tokenize(text, false, true)
				n += len(ids)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkTokenizeCold tokenizes text no earlier iteration has seen, so
// every word runs BPE.
func BenchmarkTokenizeCold(b *testing.B) {
	text := corpusText(b)
	tk := benchTokenizer(b, "kimi-k2")
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := tk.getState()
		clear(s.cache)
		tk.scratch.Put(s)
		b.StartTimer()
		tk.Tokenize(text, false, true)
	}
}

func BenchmarkDetokenize(b *testing.B) {
	text := corpusText(b)
	tk := benchTokenizer(b, "kimi-k2")
	ids, _ := tk.Tokenize(text, false, true)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tk.Detokenize(ids, false, false)
	}
}

// BenchmarkLoad opens the o200k GGUF and builds the tokenizer.
func BenchmarkLoad(b *testing.B) {
	if _, err := loadRanks(); err != nil {
		b.Skip(err)
	}
	path := bigVocab(b, "kimi-k2")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f, err := gguf.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := FromGGUF(f); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
