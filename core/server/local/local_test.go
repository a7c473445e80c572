package local

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/sample"
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/synth"
)

func tiny(t *testing.T) (*Backend, string) {
	t.Helper()
	cfg, _ := synth.Preset("tiny")
	cfg.Type = synth.TypeQ2_K
	path := filepath.Join(t.TempDir(), "tiny-00001-of-00001.gguf")
	if _, err := synth.Write(path, cfg, synth.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := Open(path, Options{Threads: 1, Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, path
}

func collect(t *testing.T, b *Backend, ctx context.Context, req server.GenerateRequest, onPiece func(int)) ([]int32, server.GenerateResult, error) {
	t.Helper()
	var toks []int32
	res, err := b.Generate(ctx, req, func(p server.Piece) error {
		if p.Token >= 0 {
			toks = append(toks, p.Token)
		}
		if onPiece != nil {
			onPiece(len(toks))
		}
		return nil
	})
	return toks, res, err
}

// TestGreedyMatchesEngine: with temperature 0 the generation loop picks the
// same tokens as the engine's own greedy loop on a fresh sequence.
func TestGreedyMatchesEngine(t *testing.T) {
	b, path := tiny(t)
	prompt, _ := b.Tokenize("The quick brown fox", false, false)
	const n = 12
	bias := map[int32]float32{}
	for _, e := range b.info.EOG {
		bias[e] = -1e30 // keep both loops going for n tokens
	}
	got, res, err := collect(t, b, context.Background(), server.GenerateRequest{Prompt: prompt, MaxTokens: n,
		Sampling: sample.Config{LogitBias: bias}}, nil)
	if err != nil || res.Finish != sample.FinishLength || res.GeneratedTokens != n {
		t.Fatalf("%v %+v", err, res)
	}

	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := engine.NewRunner(m, engine.Batch, 0)
	r.SetContext(256)
	logits, err := r.Prefill(prompt, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range b.info.EOG {
		logits[e] = -1e30
	}
	// Runner.Greedy cannot bias later steps; compare only while it avoids EOG.
	want, err := r.Greedy(logits, n)
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range want {
		if b.tok.IsEOG(tok) {
			want, got = want[:i], got[:i]
			break
		}
	}
	if d := cmp.Diff(want, got); d != "" || len(want) == 0 {
		t.Errorf("greedy tokens (-engine +generate):\n%s", d)
	}
}

func TestGenerateStops(t *testing.T) {
	b, _ := tiny(t)
	prompt, _ := b.Tokenize("Hello", false, false)
	t.Run("end of generation", func(t *testing.T) {
		eog := b.info.EOG[0]
		toks, res, err := collect(t, b, context.Background(), server.GenerateRequest{Prompt: prompt, MaxTokens: 10,
			Sampling: sample.Config{LogitBias: map[int32]float32{eog: 1e30}}}, nil)
		if err != nil || res.Finish != sample.FinishStop || res.GeneratedTokens != 1 || len(toks) != 0 {
			t.Errorf("%v %+v %v", err, res, toks)
		}
	})
	t.Run("emit asks to stop", func(t *testing.T) {
		res, err := b.Generate(context.Background(), server.GenerateRequest{Prompt: prompt, MaxTokens: 10, Sampling: sample.Config{Seed: 1, Temperature: 1}},
			func(p server.Piece) error { return server.ErrStop })
		if err != nil || res.Finish != sample.FinishStop || res.GeneratedTokens > 1 {
			t.Errorf("%v %+v", err, res)
		}
	})
	t.Run("client leaves", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		bias := map[int32]float32{}
		for _, e := range b.info.EOG {
			bias[e] = -1e30
		}
		toks, res, err := collect(t, b, ctx, server.GenerateRequest{Prompt: prompt, MaxTokens: 100, Sampling: sample.Config{LogitBias: bias}},
			func(n int) {
				if n == 3 {
					cancel()
				}
			})
		if !errors.Is(err, context.Canceled) || res.GeneratedTokens != 3 || len(toks) != 3 {
			t.Errorf("cancelled after 3 tokens: %v %+v", err, res)
		}
		// The sequence is still usable and reused.
		_, res, err = collect(t, b, context.Background(), server.GenerateRequest{Prompt: prompt, MaxTokens: 1}, nil)
		if err != nil || res.CachedTokens != 0 && res.CachedTokens != len(prompt) {
			t.Errorf("after a cancel: %v %+v", err, res)
		}
	})
	t.Run("context fills up", func(t *testing.T) {
		bias := map[int32]float32{}
		for _, e := range b.info.EOG {
			bias[e] = -1e30
		}
		_, res, err := collect(t, b, context.Background(), server.GenerateRequest{Prompt: prompt, MaxTokens: 1000, Sampling: sample.Config{LogitBias: bias}}, nil)
		if err != nil || res.Finish != sample.FinishLength || len(prompt)+res.GeneratedTokens > 256 {
			t.Errorf("%v %+v", err, res)
		}
	})
}

func TestModelInfo(t *testing.T) {
	b, _ := tiny(t)
	info := b.ModelInfo()
	if info.ID != "tiny" || info.Arch != "kimi-k3" || info.ContextLength != 256 || info.Vocab != 1024 ||
		info.EOSToken != "<|end_of_msg|>" || len(info.EOG) == 0 || info.Params == 0 || info.Size == 0 {
		t.Errorf("%+v", info)
	}
	if b.Template() == nil {
		t.Error("no chat template")
	}
	if st := b.Stats(); st.ResidentBytes <= 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestChatTemplateOverride: Options.ChatTemplate (--chat-template-file)
// replaces the model's template; one that does not compile fails the open.
// The model file's name (for /props) and its FIM tokens (none) are reported.
func TestChatTemplateOverride(t *testing.T) {
	_, path := tiny(t)
	b, err := Open(path, Options{Threads: 1, Context: 256, ChatTemplate: "{{ messages[0].content }}!"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, err := b.Template().Render(chat.Input{Messages: []chat.Message{{Role: "user", Content: "hi"}}})
	if err != nil || got != "hi!" {
		t.Errorf("render = %q, %v", got, err)
	}
	if f := b.ModelInfo().File; f != "tiny-00001-of-00001.gguf" {
		t.Errorf("File = %q", f)
	}
	if f := b.FIMTokens(); f != (server.FIM{Pre: -1, Suf: -1, Mid: -1, Rep: -1, Sep: -1}) {
		t.Errorf("FIM tokens %+v on a model without them", f)
	}
	if _, err := Open(path, Options{Threads: 1, Context: 256, ChatTemplate: "{% if %}"}); err == nil || !strings.Contains(err.Error(), "chat template") {
		t.Errorf("bad template: %v", err)
	}
}
