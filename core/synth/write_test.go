package synth

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
)

// writeTiny writes the tiny preset edited by edit and returns its result.
func writeTiny(t *testing.T, typ OutType, o WriteOptions, edit func(*Config)) (*Result, Config) {
	t.Helper()
	cfg := tinyConfig()
	cfg.Type = typ
	if edit != nil {
		edit(&cfg)
	}
	res, err := Write(filepath.Join(t.TempDir(), "m.gguf"), cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	return res, cfg
}

// values returns a tensor's values as float32.
func values(t *testing.T, f *gguf.File, ti gguf.TensorInfo) []float32 {
	t.Helper()
	data, err := f.TensorData(ti)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, ti.Elements())
	if ti.Type == quant.F32 {
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		return out
	}
	if err := quant.Dequantize(ti.Type, data, out); err != nil {
		t.Fatalf("%s: %v", ti.Name, err)
	}
	return out
}

func meanStd(v []float32) (mean, std float64) {
	for _, x := range v {
		mean += float64(x)
	}
	mean /= float64(len(v))
	for _, x := range v {
		std += (float64(x) - mean) * (float64(x) - mean)
	}
	return mean, math.Sqrt(std / float64(len(v)))
}

func TestWriteReadBack(t *testing.T) {
	splits := []struct {
		name string
		opt  gguf.SplitOptions
	}{
		{"single", gguf.SplitOptions{}},
		{"max-tensors", gguf.SplitOptions{MaxTensors: 40}},
		{"max-size", gguf.SplitOptions{MaxBytes: 1 << 20}},
	}
	for typ := range OutType(len(outTypes)) {
		for _, sp := range splits {
			if sp.opt != (gguf.SplitOptions{}) && typ != TypeF16 && typ != TypeQ2_K {
				continue // splitting does not depend on the type
			}
			t.Run(typ.String()+"/"+sp.name, func(t *testing.T) {
				res, cfg := writeTiny(t, typ, WriteOptions{Split: sp.opt}, nil)
				checkFile(t, res, cfg, sp.opt != (gguf.SplitOptions{}))
			})
		}
	}
}

func checkFile(t *testing.T, res *Result, cfg Config, split bool) {
	t.Helper()
	if split != (len(res.Paths) > 1) {
		t.Fatalf("split %v but %d files", split, len(res.Paths))
	}
	f, err := gguf.Open(res.Paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Arch() != Arch {
		t.Errorf("architecture %q", f.Arch())
	}
	want, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got []gguf.TensorSpec
	for _, ti := range f.Tensors() {
		got = append(got, gguf.TensorSpec{Name: ti.Name, Type: ti.Type, Shape: ti.Shape})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tensors (-plan +file):\n%s", diff)
	}
	if n := len(f.Strings("tokenizer.ggml.tokens")); n != cfg.NVocab {
		t.Errorf("%d tokens, want %d", n, cfg.NVocab)
	}
	if f.String("tokenizer.chat_template", "") != ChatTemplate {
		t.Error("chat template differs from the embedded one")
	}
	kv := f.Ints("attention.head_count_kv")
	if len(kv) != cfg.NLayer || kv[0] != 0 || kv[1] != 1 {
		t.Errorf("head_count_kv %v", kv)
	}
	if f.Uint("expert_count", 0) != uint64(cfg.NExpert) || f.Uint("general.file_type", 99) != uint64(cfg.Type.FileType()) {
		t.Errorf("expert_count %d file_type %d", f.Uint("expert_count", 0), f.Uint("general.file_type", 99))
	}
	for _, ti := range f.Tensors() {
		v := values(t, f, ti)
		mean, std := meanStd(v)
		if math.IsNaN(mean) || math.IsInf(mean, 0) || math.IsNaN(std) {
			t.Fatalf("%s: mean %g std %g", ti.Name, mean, std)
		}
		if len(v) > 1 && std == 0 {
			t.Errorf("%s is constant", ti.Name)
		}
		if filepath.Ext(ti.Name) == ".weight" && bytes.Contains([]byte(ti.Name), []byte("_norm.")) && math.Abs(mean-1) > 0.05 {
			t.Errorf("%s: norm weight mean %g, want about 1", ti.Name, mean)
		}
	}
	tok, _ := f.Tensor("token_embd.weight")
	if _, std := meanStd(values(t, f, tok)); math.Abs(std-1) > 0.1 {
		t.Errorf("token_embd std %g, want about 1", std)
	}
}

func fileHash(t *testing.T, paths []string) [32]byte {
	t.Helper()
	h := sha256.New()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

func TestDeterministic(t *testing.T) {
	a, _ := writeTiny(t, TypeQ2_K, WriteOptions{Workers: 1}, nil)
	b, _ := writeTiny(t, TypeQ2_K, WriteOptions{Workers: 3}, nil)
	c, _ := writeTiny(t, TypeQ2_K, WriteOptions{}, func(c *Config) { c.Seed = 2 })
	ha, hb, hc := fileHash(t, a.Paths), fileHash(t, b.Paths), fileHash(t, c.Paths)
	if ha != hb {
		t.Error("the same seed with 1 and 3 workers gave different files")
	}
	if ha == hc {
		t.Error("seeds 1 and 2 gave the same file")
	}
}

// TestPoolTensors covers tensors large enough to be assembled from a pool
// of quantized rows: every block must still decode to finite values with
// the intended spread.
func TestPoolTensors(t *testing.T) {
	res, cfg := writeTiny(t, TypeQ2_K, WriteOptions{}, func(c *Config) { c.NExpert = 136 })
	f, err := gguf.Open(res.Paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tests := []struct {
		name string
		typ  quant.Type
		std  float64
	}{
		{"blk.1.ffn_down_exps.weight", quant.Q3_K, 1 / math.Sqrt(float64(cfg.NFFExp))},
		{"blk.1.ffn_gate_exps.weight", quant.Q4_0, 1 / math.Sqrt(float64(cfg.NLatent))},
	}
	for _, tt := range tests {
		ti, ok := f.Tensor(tt.name)
		if !ok || ti.Type != tt.typ || ti.Elements() <= poolMinElements {
			t.Fatalf("%s: present %v type %s elements %d: not a pool tensor", tt.name, ok, ti.Type, ti.Elements())
		}
		mean, std := meanStd(values(t, f, ti))
		if math.IsNaN(std) || math.Abs(mean) > 0.01 || math.Abs(std/tt.std-1) > 0.15 {
			t.Errorf("%s: mean %g std %g, want about 0 and %g", tt.name, mean, std, tt.std)
		}
	}
}

// TestRouterSpreads approximates the first MoE layer's routing (its input
// is mostly the normalised token embedding, since each branch only nudges
// the residual stream) and checks that tokens pick different experts and
// that every expert gets picked.
func TestRouterSpreads(t *testing.T) {
	res, cfg := writeTiny(t, TypeF32, WriteOptions{}, nil)
	f, err := gguf.Open(res.Paths[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	get := func(name string) []float32 {
		ti, ok := f.Tensor(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		return values(t, f, ti)
	}
	emb, router, bias := get("token_embd.weight"), get("blk.1.ffn_gate_inp.weight"), get("blk.1.exp_probs_b.bias")
	E, X := cfg.NEmbd, cfg.NExpert
	used := map[int]int{}
	sets := map[[2]int]bool{}
	for tok := range 128 {
		x := emb[tok*E : (tok+1)*E]
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(E))
		score := make([]float64, X)
		for e := range X {
			var dot float64
			for i, v := range x {
				dot += float64(v) * inv * float64(router[e*E+i])
			}
			score[e] = 1/(1+math.Exp(-dot)) + float64(bias[e])
		}
		a, b := 0, 1
		if score[b] > score[a] {
			a, b = b, a
		}
		for e := 2; e < X; e++ {
			switch {
			case score[e] > score[a]:
				a, b = e, a
			case score[e] > score[b]:
				b = e
			}
		}
		used[a]++
		used[b]++
		sets[[2]int{min(a, b), max(a, b)}] = true
	}
	t.Logf("128 tokens: %d experts used, %d distinct pairs, per expert %v", len(used), len(sets), used)
	if len(used) != X || len(sets) < 12 {
		t.Errorf("128 tokens use %d of %d experts in %d distinct pairs", len(used), X, len(sets))
	}
}

func TestWriteErrors(t *testing.T) {
	cfg := tinyConfig()
	if _, err := Write(filepath.Join(t.TempDir(), "missing", "m.gguf"), cfg, WriteOptions{}); err == nil {
		t.Error("write into a missing directory succeeded")
	}
	cfg.NExpertUsed = 0
	dir := t.TempDir()
	if _, err := Write(filepath.Join(dir, "m.gguf"), cfg, WriteOptions{}); err == nil {
		t.Error("invalid configuration written")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %d files behind", len(entries))
	}
}
