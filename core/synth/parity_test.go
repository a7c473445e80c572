package synth

import (
	"math"
	"slices"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/tools/parity"
)

// llamaCases are the files llama.cpp must load and run: every output type,
// split and not, and each optional part of the kimi-k3 loader on and off.
var llamaCases = []struct {
	name  string
	typ   OutType
	split gguf.SplitOptions
	edit  func(*Config)
}{
	{"f32", TypeF32, gguf.SplitOptions{}, nil},
	{"f16", TypeF16, gguf.SplitOptions{}, nil},
	{"q8_0 split by tensors", TypeQ8_0, gguf.SplitOptions{MaxTensors: 25}, nil},
	{"q4_k_m", TypeQ4_K_M, gguf.SplitOptions{}, nil},
	{"q2_k split by size", TypeQ2_K, gguf.SplitOptions{MaxBytes: 500_000}, nil},
	{"all optional parts off", TypeQ2_K, gguf.SplitOptions{}, func(c *Config) {
		c.QLoRA, c.GateLowerBound, c.NLatent, c.AttnResBlock = 0, 0, 0, 0
		c.NExpertShared, c.MLAGate, c.RoutedNorm, c.NDense = 0, false, false, 0
		c.GatingFunc, c.ExpWeightsNorm, c.SituLinearBeta = 1, false, 0
	}},
	{"softplus gate, direct q, f16", TypeF16, gguf.SplitOptions{}, func(c *Config) {
		c.QLoRA, c.GateLowerBound = 0, 0
	}},
	{"latent without routed norm", TypeQ4_K_M, gguf.SplitOptions{}, func(c *Config) { c.RoutedNorm = false }},
	{"pool-built experts", TypeQ2_K, gguf.SplitOptions{}, func(c *Config) { c.NExpert = 136 }},
	{"k3 preset, small sizes", TypeQ2_K, gguf.SplitOptions{}, func(c *Config) {
		*c = k3Config()
		c.Type = TypeQ2_K
		c.NLayer, c.NEmbd, c.NHead, c.KDAHead, c.NVocab, c.NFF = 3, 256, 2, 64, 512, 256
		c.NExpert, c.NExpertUsed, c.NFFExp, c.NLatent = 4, 2, 256, 256
		c.QLoRA, c.KVLoRA, c.QKNope, c.QKRope, c.VHead = 64, 64, 32, 16, 32
	}},
	{"k3 depth, small widths", TypeQ8_0, gguf.SplitOptions{}, func(c *Config) {
		*c = k3Config()
		c.Type = TypeQ8_0
		c.NEmbd, c.NHead, c.KDAHead, c.NVocab, c.NFF = 128, 2, 32, 512, 128
		c.NExpert, c.NExpertUsed, c.NFFExp, c.NLatent = 4, 2, 64, 64
		c.QLoRA, c.KVLoRA, c.QKNope, c.QKRope, c.VHead = 32, 32, 16, 16, 16
	}},
}

// tokens to run: bytes, merged tokens and control tokens.
var probeTokens = []int32{1014, 72, 300, 17, 900, 42, 256, 1020, 7}

func TestLlamaLoadsAndRuns(t *testing.T) {
	r := parity.Require(t)
	var f32Logits [][]float32
	for _, tc := range llamaCases {
		t.Run(tc.name, func(t *testing.T) {
			res, cfg := writeTiny(t, tc.typ, WriteOptions{Split: tc.split}, tc.edit)
			if tc.split != (gguf.SplitOptions{}) && len(res.Paths) < 2 {
				t.Fatalf("split into %d files", len(res.Paths))
			}
			li, err := r.Load(res.Paths[0])
			if err != nil {
				t.Fatalf("llama.cpp refuses the file: %v", err)
			}
			if li.Arch != Arch || li.NVocab != cfg.NVocab || li.NLayer != cfg.NLayer || li.NEmbd != cfg.NEmbd {
				t.Fatalf("loaded %+v", li)
			}
			toks := make([]int32, len(probeTokens))
			for i, tok := range probeTokens {
				toks[i] = tok % int32(cfg.NVocab)
			}
			logits, err := r.Logits(res.Paths[0], toks, parity.LogitsOptions{All: true, Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			checkLogits(t, logits, len(toks), cfg.NVocab)
			if tc.name == "f32" {
				f32Logits = logits
			}
			if tc.name == "f16" && f32Logits != nil {
				// the same weights rounded to f16: the same model
				if d := maxDiff(f32Logits, logits); d > 0.05 {
					t.Errorf("f16 logits differ from f32 by up to %g", d)
				}
			}
		})
	}
}

func checkLogits(t *testing.T, logits [][]float32, nTok, nVocab int) {
	t.Helper()
	if len(logits) != nTok {
		t.Fatalf("%d rows, want %d", len(logits), nTok)
	}
	argmaxes := map[int]bool{}
	for i, row := range logits {
		if len(row) != nVocab {
			t.Fatalf("row %d has %d logits", i, len(row))
		}
		mean, std := meanStd(row)
		if math.IsNaN(mean) || math.IsInf(mean, 0) || math.IsNaN(std) || math.IsInf(std, 0) {
			t.Fatalf("row %d: mean %g std %g", i, mean, std)
		}
		// O(1) logits: the output head is scaled for unit variance
		if std < 0.2 || std > 5 || math.Abs(mean) > 1 {
			t.Errorf("row %d: mean %g std %g, want O(1) and not constant", i, mean, std)
		}
		argmaxes[slices.Index(row, slices.Max(row))] = true
	}
	if len(argmaxes) < 2 {
		t.Errorf("every position predicts the same token")
	}
}

func maxDiff(a, b [][]float32) float64 {
	d := 0.0
	for i := range a {
		for j := range a[i] {
			d = max(d, math.Abs(float64(a[i][j]-b[i][j])))
		}
	}
	return d
}

func TestLlamaTokenizesVocab(t *testing.T) {
	r := parity.Require(t)
	res, cfg := writeTiny(t, TypeQ8_0, WriteOptions{}, nil)
	v, err := NewVocab(cfg.NVocab)
	if err != nil {
		t.Fatal(err)
	}
	text := `<|open|>message role="user"<|sep|>Hello, the experts 天气很好 🙂<|close|>message<|sep|><|end_of_msg|>`
	toks, err := r.Tokenize(res.Paths[0], []byte(text), false, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"<|open|>", "<|sep|>", "<|close|>", "<|end_of_msg|>"} {
		if !slices.Contains(toks, int32(v.ID(c))) {
			t.Errorf("%s is not one token in %v", c, toks)
		}
	}
	if toks[len(toks)-1] != int32(v.EOS) {
		t.Errorf("last token %d, want eos %d", toks[len(toks)-1], v.EOS)
	}
	back, err := r.Detokenize(res.Paths[0], toks, false, true)
	if err != nil || string(back) != text {
		t.Errorf("detokenize = %q, %v", back, err)
	}
}
