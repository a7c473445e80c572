package kimik3_test

import (
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/kimik3"
)

// editedWeights hides or reshapes tensors of a real file.
type editedWeights struct {
	*gguf.File
	hide  string
	shape map[string][]int64
}

func (w editedWeights) Tensor(name string) (gguf.TensorInfo, bool) {
	if name == w.hide {
		return gguf.TensorInfo{}, false
	}
	t, ok := w.File.Tensor(name)
	if s, ok2 := w.shape[name]; ok2 {
		t.Shape = s
	}
	return t, ok
}

// editedConfig hides a key.
type editedConfig struct {
	*gguf.File
	hide string
}

func (c editedConfig) Has(key string) bool { return key != c.hide && c.File.Has(key) }
func (c editedConfig) Uint(key string, def uint64) uint64 {
	if key == c.hide {
		return def
	}
	return c.File.Uint(key, def)
}

func TestLoadErrors(t *testing.T) {
	path := writeModel(t, small())
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := kimik3.New(f, f, model.Options{Threads: 1}); err != nil {
		t.Fatalf("unedited file: %v", err)
	}
	for _, tc := range []struct {
		name string
		c    model.Config
		w    model.Weights
		want string
	}{
		{"missing tensor", f, editedWeights{File: f, hide: "blk.0.ssm_a"}, `"blk.0.ssm_a"`},
		{"missing expert tensor", f, editedWeights{File: f, hide: "blk.2.ffn_up_exps.weight"}, "ffn_up_exps"},
		{"missing output", f, editedWeights{File: f, hide: "output.weight"}, `"output.weight"`},
		{"wrong shape", f, editedWeights{File: f, shape: map[string][]int64{"blk.1.attn_kv_a_norm.weight": {63}}}, "blk.1.attn_kv_a_norm.weight"},
		{"missing key", editedConfig{File: f, hide: "attn_res.block_size"}, f, "attn_res.block_size"},
		{"missing kv rank", editedConfig{File: f, hide: "attention.kv_lora_rank"}, f, "kv_lora_rank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kimik3.New(tc.c, tc.w, model.Options{Threads: 1})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}
