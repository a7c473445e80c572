package model

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
)

type fakeWeights map[string][]byte

func (w fakeWeights) Tensor(name string) (gguf.TensorInfo, bool) {
	b, ok := w[name]
	if !ok {
		return gguf.TensorInfo{}, false
	}
	return gguf.TensorInfo{Name: name, Type: quant.F32, Shape: []int64{int64(len(b) / 4), 1}, Size: int64(len(b))}, true
}

func (w fakeWeights) TensorData(t gguf.TensorInfo) ([]byte, error) { return w[t.Name], nil }

func f32Bytes(x ...float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func TestBind(t *testing.T) {
	w := fakeWeights{
		"blk.0.attn_norm.weight": f32Bytes(1, 2),
		"blk.0.ssm_a":            f32Bytes(-1),
		"blk.0.exp_probs_b.bias": f32Bytes(0.5, 0.25),
	}
	var l struct {
		Norm  *Tensor `gguf:"attn_norm"`
		A     *Tensor `gguf:"ssm_a,bare"`
		B     *Tensor `gguf:"exp_probs_b.bias"`
		Gate  *Tensor `gguf:"attn_gate,optional"`
		Plain int
	}
	if err := Bind(w, "blk.0.", &l); err != nil {
		t.Fatal(err)
	}
	if l.Gate != nil || l.Norm == nil || l.A == nil || l.B == nil {
		t.Fatalf("bound %+v", l)
	}
	f, err := l.B.Floats()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]float32{0.5, 0.25}, f); d != "" {
		t.Error(d)
	}
	// trailing ones do not count
	if err := l.Norm.CheckShape(2); err != nil {
		t.Error(err)
	}
	if err := l.Norm.CheckShape(2, 1, 1); err != nil {
		t.Error(err)
	}
	if err := l.Norm.CheckShape(3); err == nil || !strings.Contains(err.Error(), "blk.0.attn_norm.weight") {
		t.Errorf("wrong shape accepted or not named: %v", err)
	}

	var missing struct {
		X *Tensor `gguf:"ffn_up"`
		Y *Tensor `gguf:"ffn_down"`
	}
	err = Bind(w, "blk.3.", &missing)
	if err == nil || !strings.Contains(err.Error(), "blk.3.ffn_up.weight") || !strings.Contains(err.Error(), "blk.3.ffn_down.weight") {
		t.Errorf("missing tensors not both reported: %v", err)
	}
	if err := Bind(w, "", l); err == nil {
		t.Error("non-pointer accepted")
	}
}

func TestRegistry(t *testing.T) {
	newNil := func(Config, Weights, Options) (Model, error) { return nil, nil }
	Register(Arch{Name: "test-arch", New: newNil})
	if a, ok := Lookup("test-arch"); !ok || a.Staged() {
		t.Errorf("Lookup: %+v %v; an architecture without Experts does not stage", a, ok)
	}
	found := false
	for _, a := range Architectures() {
		found = found || a == "test-arch"
	}
	if !found {
		t.Error("registered architecture not listed")
	}
	defer func() {
		if recover() == nil {
			t.Error("duplicate registration did not panic")
		}
	}()
	Register(Arch{Name: "test-arch", New: newNil})
}

func TestLlamaExperts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shape []int64
		want  bool
	}{
		{"blk.3.ffn_up_exps.weight", []int64{8, 3, 4}, true},
		{"blk.3.ffn_down_shexp.weight", []int64{8, 3}, false},
		{"blk.3.ffn_up_exps.weight", []int64{8}, false},
		{"output.ffn_up_exps.weight", []int64{8, 3, 4}, false},
	} {
		if got := LlamaExperts(tc.name, tc.shape); got != tc.want {
			t.Errorf("LlamaExperts(%q, %v) = %v", tc.name, tc.shape, got)
		}
	}
}
