package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
)

// fakeMoE writes a small kimi-k3-like file: one dense layer, two MoE layers
// with routed-expert tensors of mixed types, a router, a shared expert, an
// embedding and (unless tied) an output head. Sizes are worked out by hand
// in the comments, so the test checks inspect's arithmetic independently.
func fakeMoE(t *testing.T, tied bool) (string, []float32) {
	t.Helper()
	specs := []gguf.TensorSpec{
		{Name: "token_embd.weight", Type: quant.F32, Shape: []int64{8, 10}},               // 320 B, rows of 32 B
		{Name: "output_norm.weight", Type: quant.F32, Shape: []int64{8}},                  // 32
		{Name: "blk.0.ffn_up.weight", Type: quant.F16, Shape: []int64{8, 16}},             // 256
		{Name: "blk.1.ffn_gate_inp.weight", Type: quant.F32, Shape: []int64{8, 4}},        // 128
		{Name: "blk.1.ffn_gate_exps.weight", Type: quant.Q4_0, Shape: []int64{32, 6, 4}},  // 24 rows x 18 = 432, 108 per expert
		{Name: "blk.1.ffn_up_exps.weight", Type: quant.Q4_0, Shape: []int64{32, 6, 4}},    // 432, 108 per expert
		{Name: "blk.1.ffn_down_exps.weight", Type: quant.Q8_0, Shape: []int64{32, 8, 4}},  // 32 rows x 34 = 1088, 272 per expert
		{Name: "blk.1.ffn_up_shexp.weight", Type: quant.F32, Shape: []int64{8, 8}},        // 256
		{Name: "blk.2.ffn_gate_exps.weight", Type: quant.Q2_K, Shape: []int64{256, 2, 4}}, // 8 rows x 84 = 672, 168 per expert
		{Name: "blk.2.ffn_down_exps.weight", Type: quant.F16, Shape: []int64{2, 256, 4}},  // 4096, 1024 per expert
	}
	if !tied {
		specs = append(specs, gguf.TensorSpec{Name: "output.weight", Type: quant.Q8_0, Shape: []int64{32, 10}}) // 10 rows x 34 = 340
	}
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: gguf.Str("kimi-k3")},
		{Key: "general.name", Value: gguf.Str("fake")},
		{Key: "kimi-k3.block_count", Value: gguf.U32(3)},
		{Key: "kimi-k3.expert_count", Value: gguf.U32(4)},
		{Key: "kimi-k3.expert_used_count", Value: gguf.U32(2)},
		{Key: "kimi-k3.attention.head_count_kv", Value: gguf.I32s([]int32{0, 1, 0})},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strs([]string{"a", "b", "c"})},
		{Key: "tokenizer.chat_template", Value: gguf.Str(strings.Repeat("{{ x }}\n", 40))},
	}
	path := filepath.Join(t.TempDir(), "fake.gguf")
	w, err := gguf.Create(path, kvs, specs, gguf.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// blk.0.ffn_up.weight holds values exact in f16, for the dump test.
	var ffnUp []float32
	for _, s := range specs {
		n, _ := quant.RowSize(s.Type, s.Shape[0])
		rows := int64(1)
		for _, d := range s.Shape[1:] {
			rows *= d
		}
		data := make([]byte, n*rows)
		if s.Name == "blk.0.ffn_up.weight" {
			for i := range 128 {
				v := float32(i)*0.25 - 16
				ffnUp = append(ffnUp, v)
				binary.LittleEndian.PutUint16(data[2*i:], quant.FP32ToFP16(v))
			}
		}
		if err := w.WriteTensor(s.Name, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path, ffnUp
}

func runInspectArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	rc := runMain(append([]string{"inspect"}, args...), &out, &errOut)
	return rc, out.String(), errOut.String()
}

// routedTypesWant is fakeMoE's routed experts by type, most bytes first:
// elements are the shapes' products, bits per weight the types' block sizes.
var routedTypesWant = []routedTypeBits{
	{Type: "f16", Elements: 2 * 256 * 4, Bytes: 4096, BitsPerWeight: 16},
	{Type: "q8_0", Elements: 32 * 8 * 4, Bytes: 1088, BitsPerWeight: 8.5},
	{Type: "q4_0", Elements: 2 * 32 * 6 * 4, Bytes: 864, BitsPerWeight: 4.5},
	{Type: "q2_K", Elements: 256 * 2 * 4, Bytes: 672, BitsPerWeight: 2.625},
}

func TestInspectTotals(t *testing.T) {
	cases := []struct {
		name string
		tied bool
		want streamingEstimate
	}{
		{"untied", false, streamingEstimate{
			TensorBytes:     8052, // always + routed
			AlwaysBytes:     1332, // 320 + 32 + 256 + 128 + 256 + 340
			RoutedBytes:     6720, // 432 + 432 + 1088 + 672 + 4096
			ExpertCount:     4,
			ExpertUsedCount: 2,
			MoELayers:       2,
			ExpertBytesLayer: []expertLayerBytes{
				{Layer: 1, Bytes: 488},  // 108 + 108 + 272
				{Layer: 2, Bytes: 1192}, // 168 + 1024
			},
			EmbeddingBytes:    320,
			EmbeddingRowBytes: 32,
			// 1332 - 320 + 32 + 2*488 + 2*1192
			DecodeTokenBytes:    4404,
			AlwaysTokenBytes:    1044, // 1332 - 320 + 32
			RoutedTokenBytes:    3360, // 2*488 + 2*1192
			RoutedBitsPerWeight: 6720 * 8 / 6656.0,
			RoutedTypes:         routedTypesWant,
		}},
		{"tied", true, streamingEstimate{
			TensorBytes:     7712,
			AlwaysBytes:     992,
			RoutedBytes:     6720,
			ExpertCount:     4,
			ExpertUsedCount: 2,
			MoELayers:       2,
			ExpertBytesLayer: []expertLayerBytes{
				{Layer: 1, Bytes: 488},
				{Layer: 2, Bytes: 1192},
			},
			EmbeddingBytes:    320,
			EmbeddingRowBytes: 32,
			TiedEmbeddings:    true,
			// The table is the output head too: 992 + 2*488 + 2*1192
			DecodeTokenBytes:    4352,
			AlwaysTokenBytes:    992,
			RoutedTokenBytes:    3360,
			RoutedBitsPerWeight: 6720 * 8 / 6656.0,
			RoutedTypes:         routedTypesWant,
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path, _ := fakeMoE(t, c.tied)
			rc, out, errOut := runInspectArgs(t, path, "--json")
			if rc != 0 {
				t.Fatalf("rc %d: %s", rc, errOut)
			}
			var rep inspectReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("bad JSON: %v\n%s", err, out)
			}
			if diff := cmp.Diff(c.want, rep.Streaming); diff != "" {
				t.Errorf("streaming (-want +got):\n%s", diff)
			}
			if rep.Arch != "kimi-k3" || len(rep.Tensors) != 10+btoi(!c.tied) {
				t.Errorf("arch %q, %d tensors", rep.Arch, len(rep.Tensors))
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestInspectHuman(t *testing.T) {
	path, _ := fakeMoE(t, false)
	rc, out, errOut := runInspectArgs(t, path)
	if rc != 0 {
		t.Fatalf("rc %d: %s", rc, errOut)
	}
	// Column widths depend on the longest entry; compare with runs of
	// spaces collapsed.
	flat := collapseSpaces(out)
	for _, want := range []string{
		"architecture  kimi-k3",
		"attention.head_count_kv  []i32  [0, 1, 0]",
		"ggml.tokens      []str  3 entries",
		"chat_template    str    \"{{ x }} {{ x }}", // summarised, not dumped
		"blk.1.ffn_down_exps.weight *  q8_0   32 x 8 x 4   1.1 KB",
		"always needed          1.3 KB",
		"one expert, one layer  488 B to 1.2 KB",
		"one decode token       4.4 KB",
		"routed bits/weight 8.077 f16 16 bpw, 61% of the expert bytes; q8_0 8.5 bpw, 16% of the expert bytes; q4_0 4.5 bpw, 13% of the expert bytes; q2_K 2.625 bpw, 10% of the expert bytes",
		"always needed 1.0 KB every token",
		"routed experts 3.4 KB 2 x one expert x 2 MoE layers",
	} {
		if !strings.Contains(flat, collapseSpaces(want)) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "{{ x }}\n{{ x }}") {
		t.Errorf("chat template dumped in full")
	}
}

func collapseSpaces(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

func TestInspectDump(t *testing.T) {
	path, want := fakeMoE(t, false)
	out := filepath.Join(t.TempDir(), "up.f32")
	rc, stdout, errOut := runInspectArgs(t, "--dump", "blk.0.ffn_up.weight", "--out", out, path)
	if rc != 0 {
		t.Fatalf("rc %d: %s", rc, errOut)
	}
	if !strings.Contains(stdout, "wrote 128 float32 values of blk.0.ffn_up.weight") {
		t.Errorf("stdout %q", stdout)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(raw)/4)
	for i := range got {
		got[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dump (-want +got):\n%s", diff)
	}
}

func TestInspectErrors(t *testing.T) {
	path, _ := fakeMoE(t, false)
	unsupported := writeUnsupported(t)
	cases := []struct {
		name string
		args []string
		rc   int
		want string
	}{
		{"no file", nil, 2, "usage: k3 inspect"},
		{"two files", []string{path, path}, 2, "usage: k3 inspect"},
		{"dump without out", []string{path, "--dump", "x"}, 2, "usage"},
		{"missing file", []string{"/nonexistent.gguf"}, 1, "no such file"},
		{"not gguf", []string{"inspect.go"}, 1, "not a GGUF file"},
		{"unknown tensor", []string{path, "--dump", "nope", "--out", "-"}, 1, `no tensor "nope"`},
		{"unsupported type", []string{unsupported, "--dump", "t", "--out", "-"}, 1, "is not supported yet"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rc, _, errOut := runInspectArgs(t, c.args...)
			if rc != c.rc || !strings.Contains(errOut, c.want) {
				t.Errorf("rc %d, stderr %q; want rc %d and %q", rc, errOut, c.rc, c.want)
			}
		})
	}
}

// writeUnsupported writes a file whose one tensor has a type quant cannot
// dequantize (Q8_1 is an activation-only type in ggml).
func writeUnsupported(t *testing.T) string {
	if quant.CanDequantize(quant.Q8_1) {
		t.Skip("quant can dequantize Q8_1; pick another unsupported type")
	}
	path := filepath.Join(t.TempDir(), "u.gguf")
	w, err := gguf.Create(path, nil, []gguf.TensorSpec{{Name: "t", Type: quant.Q8_1, Shape: []int64{32}}}, gguf.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("t", make([]byte, 36)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
