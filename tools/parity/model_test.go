package parity

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tinyLlama is a small llama-architecture model with an SPM vocabulary:
// <unk> <s> </s>, the 256 byte tokens, then the words and their prefixes.
type tinyLlama struct {
	path             string
	vocab            []string
	embd, out, normW []float32 // token_embd, output, output_norm
	nEmbd            int
}

const (
	tinyEmbd, tinyFF, tinyLayers, tinyHeads = 16, 32, 2, 2
	tinyEps                                 = 1e-5
)

func (m *tinyLlama) id(tok string) int32 {
	i := slices.Index(m.vocab, tok)
	if i < 0 {
		panic("no token " + tok)
	}
	return int32(i)
}

// writeTinyLlama writes the model. With zeroBlocks every attention and FFN
// output projection is zero, so the residual stream carries each token's
// embedding unchanged and the logits have a closed form.
func writeTinyLlama(t testing.TB, zeroBlocks bool, drop string) *tinyLlama {
	t.Helper()
	rng := rand.New(rand.NewPCG(11, 12))
	vocab := []string{"<unk>", "<s>", "</s>"}
	types := []int32{2, 3, 3}
	for b := range 256 {
		vocab = append(vocab, fmt.Sprintf("<0x%02X>", b))
		types = append(types, 6)
	}
	for _, w := range []string{"hello", "world"} {
		for i := 1; i <= len(w); i++ {
			vocab = append(vocab, "▁"+w[:i])
			types = append(types, 1)
		}
	}
	for _, c := range "▁helowrd" {
		vocab = append(vocab, string(c))
		types = append(types, 1)
	}
	scores := make([]float32, len(vocab))
	for i, v := range vocab {
		scores[i] = float32(len(v)) // longer pieces win the merges
	}
	nv := len(vocab)
	m := &tinyLlama{path: filepath.Join(t.TempDir(), "tiny-llama.gguf"), vocab: vocab, nEmbd: tinyEmbd}
	rnd := func(n int, scale float32) []float32 { return randFloats(rng, n, scale) }
	m.embd, m.out, m.normW = rnd(nv*tinyEmbd, 1), rnd(nv*tinyEmbd, 0.5), rnd(tinyEmbd, 1)
	kvs := []KV{
		kvOf("general.architecture", "llama"),
		kvOf("general.name", "k3 parity tiny llama"),
		kvOf("llama.context_length", uint32(128)),
		kvOf("llama.embedding_length", uint32(tinyEmbd)),
		kvOf("llama.block_count", uint32(tinyLayers)),
		kvOf("llama.feed_forward_length", uint32(tinyFF)),
		kvOf("llama.attention.head_count", uint32(tinyHeads)),
		kvOf("llama.attention.head_count_kv", uint32(tinyHeads)),
		kvOf("llama.attention.layer_norm_rms_epsilon", float32(tinyEps)),
		kvOf("tokenizer.ggml.model", "llama"),
		kvOf("tokenizer.ggml.tokens", vocab),
		kvOf("tokenizer.ggml.scores", scores),
		kvOf("tokenizer.ggml.token_type", types),
		kvOf("tokenizer.ggml.unknown_token_id", uint32(0)),
		kvOf("tokenizer.ggml.bos_token_id", uint32(1)),
		kvOf("tokenizer.ggml.eos_token_id", uint32(2)),
		kvOf("tokenizer.ggml.add_bos_token", true),
		kvOf("tokenizer.ggml.add_eos_token", false),
	}
	e := int64(tinyEmbd)
	tensors := []testTensor{
		f32Tensor("token_embd.weight", m.embd, e, int64(nv)),
		f32Tensor("output_norm.weight", m.normW, e),
		f32Tensor("output.weight", m.out, e, int64(nv)),
	}
	for l := range tinyLayers {
		proj := func(n int) []float32 {
			if zeroBlocks {
				return make([]float32, n)
			}
			return rnd(n, 0.3)
		}
		p := fmt.Sprintf("blk.%d.", l)
		tensors = append(tensors,
			f32Tensor(p+"attn_norm.weight", rnd(tinyEmbd, 1), e),
			f32Tensor(p+"attn_q.weight", rnd(tinyEmbd*tinyEmbd, 0.3), e, e),
			f32Tensor(p+"attn_k.weight", rnd(tinyEmbd*tinyEmbd, 0.3), e, e),
			f32Tensor(p+"attn_v.weight", rnd(tinyEmbd*tinyEmbd, 0.3), e, e),
			f32Tensor(p+"attn_output.weight", proj(tinyEmbd*tinyEmbd), e, e),
			f32Tensor(p+"ffn_norm.weight", rnd(tinyEmbd, 1), e),
			f32Tensor(p+"ffn_gate.weight", rnd(tinyEmbd*tinyFF, 0.3), e, tinyFF),
			f32Tensor(p+"ffn_up.weight", rnd(tinyEmbd*tinyFF, 0.3), e, tinyFF),
			f32Tensor(p+"ffn_down.weight", proj(tinyFF*tinyEmbd), tinyFF, e),
		)
	}
	tensors = slices.DeleteFunc(tensors, func(tt testTensor) bool { return tt.name == drop })
	writeGGUF(t, m.path, kvs, tensors)
	return m
}

// wantLogits is the closed form for a zeroBlocks model: output · (rmsnorm(embd[tok]) * norm).
func (m *tinyLlama) wantLogits(tok int32) []float64 {
	x := m.embd[int(tok)*m.nEmbd : int(tok+1)*m.nEmbd]
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	scale := 1 / math.Sqrt(ss/float64(m.nEmbd)+tinyEps)
	out := make([]float64, len(m.vocab))
	for v := range out {
		for j, xj := range x {
			out[v] += float64(m.out[v*m.nEmbd+j]) * float64(xj) * scale * float64(m.normW[j])
		}
	}
	return out
}

func TestLoad(t *testing.T) {
	r := Require(t)
	m := writeTinyLlama(t, false, "")
	li, err := r.Load(m.path)
	if err != nil {
		t.Fatal(err)
	}
	want := LoadInfo{Arch: "llama", NVocab: len(m.vocab), NLayer: tinyLayers, NEmbd: tinyEmbd, NHead: tinyHeads,
		NHeadKV: tinyHeads, NCtxTrain: 128, VocabType: 1, BOS: 1, EOS: 2}
	got := *li
	got.Desc, got.NParams, got.Size = "", 0, 0
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("load info (-want +got):\n%s", d)
	}
	wantParams := uint64(2*len(m.vocab)*tinyEmbd + tinyEmbd + tinyLayers*(2*tinyEmbd+4*tinyEmbd*tinyEmbd+3*tinyEmbd*tinyFF))
	if li.NParams != wantParams {
		t.Errorf("n_params %d, want %d", li.NParams, wantParams)
	}
}

func TestLoadRejects(t *testing.T) {
	r := Require(t)
	missing := writeTinyLlama(t, false, "blk.1.ffn_down.weight")
	garbage := filepath.Join(t.TempDir(), "garbage.gguf")
	if err := os.WriteFile(garbage, []byte("GGUF\x03\x00\x00\x00not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, path, msg string }{
		{"missing tensor", missing.path, "blk.1.ffn_down.weight"},
		{"garbage", garbage, "gguf"},
		{"no such file", filepath.Join(t.TempDir(), "nope.gguf"), "nope.gguf"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Load(tc.path)
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("got %v, want a *LoadError", err)
			}
			if !strings.Contains(le.Msg, tc.msg) {
				t.Errorf("load error does not mention %q: %s", tc.msg, le.Msg)
			}
		})
	}
	if _, err := r.Meta(garbage); !errors.As(err, new(*LoadError)) {
		t.Errorf("Meta(garbage): got %v, want a *LoadError", err)
	}
}

func TestLogitsZeroBlocks(t *testing.T) {
	r := Require(t)
	m := writeTinyLlama(t, true, "")
	tokens := []int32{1, m.id("▁hello"), 7, m.id("▁world"), m.id("▁hello"), 200}
	for _, o := range []LogitsOptions{{All: true}, {All: true, Batch: 2, Threads: 2}, {All: true, CPU: Generic}, {NoRepack: true}} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			got, err := r.Logits(m.path, tokens, o)
			if err != nil {
				t.Fatal(err)
			}
			first := 0
			if !o.All {
				first = len(tokens) - 1
			}
			if len(got) != len(tokens)-first {
				t.Fatalf("got %d rows, want %d", len(got), len(tokens)-first)
			}
			for i, row := range got {
				want := m.wantLogits(tokens[first+i])
				if len(row) != len(want) {
					t.Fatalf("row %d has %d logits, want %d", i, len(row), len(want))
				}
				for v := range row {
					if math.Abs(float64(row[v])-want[v]) > 1e-4*(1+math.Abs(want[v])) {
						t.Fatalf("position %d token %d: logit %g, want %g", first+i, v, row[v], want[v])
					}
				}
			}
		})
	}
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// TestLogitsContext checks, on a model whose attention matters, that row i of
// an all-positions run is the logits of the prefix tokens[:i+1], and that
// greedy decoding follows the argmax of the logits.
func TestLogitsContext(t *testing.T) {
	r := Require(t)
	m := writeTinyLlama(t, false, "")
	tokens := []int32{1, m.id("▁hello"), 50, m.id("▁world"), m.id("▁hello")}
	all, err := r.Logits(m.path, tokens, LogitsOptions{All: true, Batch: 3})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(all[1], all[4]); d == "" {
		t.Error("the same token at positions 1 and 4 got identical logits: context is ignored")
	}
	for i := range tokens {
		last, err := r.Logits(m.path, tokens[:i+1], LogitsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for v := range last[0] {
			if math.Abs(float64(last[0][v]-all[i][v])) > 1e-4*(1+math.Abs(float64(all[i][v]))) {
				t.Fatalf("prefix %d: logit %d is %g alone, %g in the full run", i+1, v, last[0][v], all[i][v])
			}
		}
	}
	gen, err := r.GreedyOpts(m.path, tokens, 3, LogitsOptions{IgnoreEOG: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(gen) != 3 {
		t.Fatalf("greedy returned %v, want 3 tokens", gen)
	}
	seq := slices.Clone(tokens)
	for i, g := range gen {
		l, err := r.Logits(m.path, seq, LogitsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := argmax(l[0]); g != want {
			t.Errorf("greedy token %d is %d, argmax of the logits is %d", i, g, want)
		}
		seq = append(seq, g)
	}
}

func TestLogitsErrors(t *testing.T) {
	r := Require(t)
	m := writeTinyLlama(t, true, "")
	for name, toks := range map[string][]int32{"empty": {}, "out of vocabulary": {1, int32(len(m.vocab))}, "negative": {-1}} {
		t.Run(name, func(t *testing.T) {
			_, err := r.Logits(m.path, toks, LogitsOptions{})
			var e *Error
			if !errors.As(err, &e) || e.Exit != 2 {
				t.Fatalf("got %v, want a usage *Error", err)
			}
		})
	}
}

func TestTokenize(t *testing.T) {
	r := Require(t)
	m := writeTinyLlama(t, true, "")
	b := func(x byte) int32 { return 3 + int32(x) }
	tests := []struct {
		text                     string
		addSpecial, parseSpecial bool
		want                     []int32
	}{
		{"hello world", true, false, []int32{1, m.id("▁hello"), m.id("▁world")}},
		{"hello world", false, false, []int32{m.id("▁hello"), m.id("▁world")}},
		{"hel", false, false, []int32{m.id("▁hel")}},
		{"é", false, false, []int32{m.id("▁"), b(0xc3), b(0xa9)}},
		{"hello</s>", false, true, []int32{m.id("▁hello"), 2}},
		{"</s>", false, false, []int32{m.id("▁"), b('<'), b('/'), b('s'), b('>')}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q/%v/%v", tc.text, tc.addSpecial, tc.parseSpecial), func(t *testing.T) {
			got, err := r.Tokenize(m.path, []byte(tc.text), tc.addSpecial, tc.parseSpecial)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("tokens (-want +got):\n%s", d)
			}
		})
	}
}

func TestDetokenize(t *testing.T) {
	r := Require(t)
	m := writeTinyLlama(t, true, "")
	hw := []int32{1, m.id("▁hello"), m.id("▁world"), 2}
	tests := []struct {
		tokens                        []int32
		removeSpecial, unparseSpecial bool
		want                          string
	}{
		// llama.cpp strips the SPM leading space only when no BOS was removed.
		{hw, true, false, " hello world"},
		{hw[1:3], false, false, "hello world"},
		{hw, false, true, "<s> hello world</s>"},
		{[]int32{m.id("▁"), 3 + 0xc3, 3 + 0xa9}, false, false, "é"},
		{[]int32{3 + 0xff}, false, false, "\xff"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v/%v/%v", tc.tokens, tc.removeSpecial, tc.unparseSpecial), func(t *testing.T) {
			got, err := r.Detokenize(m.path, tc.tokens, tc.removeSpecial, tc.unparseSpecial)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	pieces, err := r.Pieces(m.path, []int32{1, m.id("▁hello"), 3 + 0xc3, m.id("l")}, true)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]byte{[]byte("<s>"), []byte(" hello"), {0xc3}, []byte("l")}
	if d := cmp.Diff(want, pieces); d != "" {
		t.Errorf("pieces (-want +got):\n%s", d)
	}
}
