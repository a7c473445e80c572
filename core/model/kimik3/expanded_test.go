package kimik3_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/core/synth"
	"github.com/k3-inference/k3/tools/parity"
)

// expandKVB rewrites an F32 synthetic file from the absorbed MLA layout
// (attn_k_b, attn_v_b) to the attn_kv_b one. llama.cpp runs attn_kv_b only
// without the *_mla head sizes, where the value head is the latent width,
// so the source must have VHead == KVLoRA.
func expandKVB(t *testing.T, src string, c synth.Config) string {
	t.Helper()
	f, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	nope, kv, vd, H := c.QKNope, c.KVLoRA, c.VHead, c.NHead
	var kvs []gguf.KV
	for _, e := range f.KVs() {
		switch {
		case strings.HasSuffix(e.Key, ".attention.key_length_mla"), strings.HasSuffix(e.Key, ".attention.value_length_mla"):
			e.Value = gguf.U32(0)
		case strings.HasSuffix(e.Key, ".attention.key_length"):
			e.Value = gguf.U32(uint32(nope + c.QKRope))
		case strings.HasSuffix(e.Key, ".attention.head_count_kv"):
			// every head has its own K and V in this layout
			heads := make([]int32, c.NLayer)
			for il := range heads {
				if c.IsMLA(il) {
					heads[il] = int32(H)
				}
			}
			e.Value = gguf.I32s(heads)
		}
		kvs = append(kvs, e)
	}
	var specs []gguf.TensorSpec
	data := map[string][]byte{}
	for _, ti := range f.Tensors() {
		b, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(ti.Name, "attn_v_b.weight"):
			continue
		case strings.HasSuffix(ti.Name, "attn_k_b.weight"):
			if ti.Type != quant.F32 {
				t.Fatal("expandKVB needs an F32 file")
			}
			vb, _ := f.Tensor(strings.Replace(ti.Name, "attn_k_b", "attn_v_b", 1))
			vbd, _ := f.TensorData(vb)
			at := func(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[4*i:]) }
			out := make([]byte, 4*kv*H*(nope+vd))
			for h := 0; h < H; h++ {
				for r := 0; r < kv; r++ {
					for j := 0; j < nope; j++ {
						binary.LittleEndian.PutUint32(out[4*((h*(nope+vd)+j)*kv+r):], at(b, h*kv*nope+r*nope+j))
					}
					for d := 0; d < vd; d++ {
						binary.LittleEndian.PutUint32(out[4*((h*(nope+vd)+nope+d)*kv+r):], at(vbd, h*vd*kv+d*kv+r))
					}
				}
			}
			name := strings.Replace(ti.Name, "attn_k_b", "attn_kv_b", 1)
			specs = append(specs, gguf.TensorSpec{Name: name, Type: quant.F32, Shape: []int64{int64(kv), int64(H * (nope + vd))}})
			data[name] = out
			continue
		}
		specs = append(specs, gguf.TensorSpec{Name: ti.Name, Type: ti.Type, Shape: ti.Shape})
		data[ti.Name] = b
	}
	dst := filepath.Join(t.TempDir(), "kvb.gguf")
	w, err := gguf.Create(dst, kvs, specs, gguf.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if err := w.WriteTensor(s.Name, data[s.Name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestParityExpandedKVB(t *testing.T) {
	for _, rot := range []int{0, 16} {
		t.Run(fmt.Sprintf("rope%d", rot), func(t *testing.T) { testExpanded(t, rot) })
	}
}

func testExpanded(t *testing.T, rot int) {
	c := small()
	c.VHead, c.QKRope = c.KVLoRA, rot
	src := writeModel(t, c)
	path := expandKVB(t, src, c)
	toks := prompt(20, c.NVocab)
	got := batchLogits(t, load(t, path, 2), toks, 512)
	absorbed := batchLogits(t, load(t, src, 2), toks, 512)
	d, at := maxAbs(absorbed, got)
	t.Logf("attn_kv_b vs absorbed (same weights, different cache rounding): max|Δlogit| = %.3g (at pos %d)", d, at)
	// with a pe part the two layouts genuinely differ: llama.cpp's
	// attn_kv_b path puts k_pe before k_nope while q keeps nope first
	if rot == 0 && (d > 1e-2 || math.IsNaN(d)) {
		t.Errorf("the two MLA layouts differ by %.3g at position %d", d, at)
	}
	ref := parity.Require(t)
	want, err := ref.Logits(path, toks, parity.LogitsOptions{Threads: 2, All: true, CPU: "generic"})
	if err != nil {
		t.Fatal(err)
	}
	d, at = maxAbs(want, got)
	t.Logf("attn_kv_b vs llama.cpp generic: max|Δlogit| = %.3g (at pos %d)", d, at)
	if d > 1e-4 {
		t.Errorf("max|Δlogit| %.3g at position %d", d, at)
	}
}
