package ggufreq

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
)

func TestOpenRequest(t *testing.T) {
	specs := []gguf.TensorSpec{
		{Name: "token_embd.weight", Type: quant.F32, Shape: []int64{8, 5}},
		{Name: "blk.0.attn_norm.weight", Type: quant.F32, Shape: []int64{8}},
		{Name: "blk.0.ffn_up_exps.weight", Type: quant.F32, Shape: []int64{8, 3, 4}},
		{Name: "blk.0.ffn_down_exps.weight", Type: quant.F32, Shape: []int64{3, 8, 4}},
		{Name: "blk.12.ffn_gate_exps.weight", Type: quant.F32, Shape: []int64{8, 3, 6}},
		{Name: "blk.12.exp_probs_b.bias", Type: quant.F32, Shape: []int64{6}},
	}
	w, err := gguf.Create(filepath.Join(t.TempDir(), "m"), []gguf.KV{{Key: "general.architecture", Value: gguf.Str("kimi-k3")}}, specs, gguf.WriteOptions{Split: gguf.SplitOptions{MaxTensors: 2}})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		n := int64(4)
		for _, d := range s.Shape {
			n *= d
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*31 + j)
		}
		if err := w.WriteTensor(s.Name, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(w.Paths()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req, err := OpenRequest(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Shards) != 3 || len(req.Tensors) != len(specs) {
		t.Fatalf("%d shards, %d tensors", len(req.Shards), len(req.Tensors))
	}
	wantRouted := map[string][3]int{ // layer, experts, bytes per expert
		"blk.0.ffn_up_exps.weight":    {0, 4, 8 * 3 * 4},
		"blk.0.ffn_down_exps.weight":  {0, 4, 3 * 8 * 4},
		"blk.12.ffn_gate_exps.weight": {12, 6, 8 * 3 * 4},
	}
	for _, tn := range req.Tensors {
		w, routed := wantRouted[tn.Name]
		if tn.Routed() != routed {
			t.Errorf("%s: routed %v", tn.Name, tn.Routed())
			continue
		}
		if routed && (tn.Layer != w[0] || tn.Experts != w[1] || tn.ExpertSize != int64(w[2])) {
			t.Errorf("%s: layer %d, %d experts of %d bytes; want %v", tn.Name, tn.Layer, tn.Experts, tn.ExpertSize, w)
		}
		// The ranges are the tensors' bytes in their shards.
		ti, _ := f.Tensor(tn.Name)
		data, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		whole, err := readRange(req.Shards[tn.Shard], tn.Offset, tn.Size)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(whole, data) {
			t.Errorf("%s: range [%d,+%d) of shard %d is not the tensor's data", tn.Name, tn.Offset, tn.Size, tn.Shard)
		}
	}
}

// TestOpenRequestWith: the architecture's predicate, not the name
// convention, decides which tensors are routed.
func TestOpenRequestWith(t *testing.T) {
	specs := []gguf.TensorSpec{
		{Name: "blk.0.ffn_up_exps.weight", Type: quant.F32, Shape: []int64{8, 3, 4}},
		{Name: "blk.0.ffn_up_experts.weight", Type: quant.F32, Shape: []int64{8, 3, 4}},
		{Name: "token_embd.weight", Type: quant.F32, Shape: []int64{8, 4}},
	}
	w, err := gguf.Create(filepath.Join(t.TempDir(), "m"), []gguf.KV{{Key: "general.architecture", Value: gguf.Str("other")}}, specs, gguf.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		n := int64(4)
		for _, d := range s.Shape {
			n *= d
		}
		if err := w.WriteTensor(s.Name, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(w.Paths()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// token_embd has no layer: never routed, whatever the predicate says.
	req, err := OpenRequestWith(f, func(name string, _ []int64) bool { return name != "blk.0.ffn_up_exps.weight" })
	if err != nil {
		t.Fatal(err)
	}
	for _, tn := range req.Tensors {
		if want := tn.Name == "blk.0.ffn_up_experts.weight"; tn.Routed() != want || (want && tn.Experts != 4) {
			t.Errorf("%s: routed %v with %d experts", tn.Name, tn.Routed(), tn.Experts)
		}
	}
}

func TestLayerOf(t *testing.T) {
	for name, want := range map[string]int{"blk.7.x": 7, "blk.x.y": -1, "output.weight": -1, "blk.": -1, "blk.93.ffn_up_exps.weight": 93, "blk.-1.a": -1} {
		if got := layerOf(name); got != want {
			t.Errorf("layerOf(%q) = %d, want %d", name, got, want)
		}
	}
}

func readRange(path string, off, size int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, size)
	_, err = f.ReadAt(b, off)
	return b, err
}
