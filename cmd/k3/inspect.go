package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/quant"
)

func init() {
	register(&command{
		name:    "inspect",
		summary: "show a GGUF model's hyperparameters, tensors and streaming footprint",
		run:     runInspect,
	})
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", stderr)
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	dump := fs.String("dump", "", "write this tensor dequantized to little-endian float32 (needs --out)")
	out := fs.String("out", "", "file for --dump ('-' for stdout)")
	routing := fs.Int("routing", 0, "run the model over N tokens one at a time and report its routing: lookahead precision by rank, next-token reuse, popularity")
	routingText := fs.String("routing-text", "", "with --routing: the prompt text (default: random token ids)")
	routingSeed := fs.Uint64("routing-seed", 1, "with --routing: seed of the random token ids")
	threads := fs.Int("t", 0, "with --routing: threads (0: one per CPU)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: k3 inspect MODEL.gguf [--json] [--dump TENSOR --out FILE] [--routing N]")
		fs.PrintDefaults()
	}
	// Flags may come before or after the model path.
	var paths []string
	for rest := args; ; {
		if err := parseFlags(fs, rest, true); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		paths = append(paths, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(paths) != 1 || (*dump != "") != (*out != "") || *routing < 0 {
		fs.Usage()
		return errUsage
	}
	if *routing > 0 {
		return inspectRouting(paths[0], *routing, *routingText, *routingSeed, *threads, *asJSON, stdout, stderr)
	}
	f, err := gguf.Open(paths[0])
	if err != nil {
		return err
	}
	defer f.Close()
	if *dump != "" {
		return dumpTensor(f, *dump, *out, stdout)
	}
	rep := buildInspectReport(f)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printInspectReport(stdout, rep)
}

// inspectReport is everything inspect prints; --json emits it as is.
type inspectReport struct {
	Path            string            `json:"path"`
	Shards          []string          `json:"shards"`
	Version         uint32            `json:"gguf_version"`
	Arch            string            `json:"architecture"`
	Hyperparameters []inspectKV       `json:"hyperparameters"`
	General         []inspectKV       `json:"general"`
	Tokenizer       []inspectKV       `json:"tokenizer"`
	Other           []inspectKV       `json:"other,omitempty"`
	Tensors         []inspectTensor   `json:"tensors"`
	Streaming       streamingEstimate `json:"streaming"`
}

// inspectKV is one metadata entry: the key without its namespace prefix,
// the full value for JSON, and a short rendering for people.
type inspectKV struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
	short string
}

type inspectTensor struct {
	Name   string  `json:"name"`
	Type   string  `json:"type"`
	Shape  []int64 `json:"shape"`
	Bytes  int64   `json:"bytes"`
	Shard  int     `json:"shard"` // index into shards
	Offset int64   `json:"offset"`
	Routed bool    `json:"routed_expert"`
}

// streamingEstimate splits the weights by how a streaming runtime uses
// them: always-needed tensors stay resident; routed-expert tensors are read
// one expert slice at a time, as the router picks them.
type streamingEstimate struct {
	TensorBytes       int64              `json:"tensor_bytes"`
	AlwaysBytes       int64              `json:"always_needed_bytes"`
	RoutedBytes       int64              `json:"routed_expert_bytes"`
	ExpertCount       int64              `json:"expert_count"`
	ExpertUsedCount   int64              `json:"expert_used_count"`
	MoELayers         int                `json:"moe_layers"`
	ExpertBytesLayer  []expertLayerBytes `json:"expert_bytes_per_layer"`
	EmbeddingBytes    int64              `json:"embedding_bytes"`
	EmbeddingRowBytes int64              `json:"embedding_row_bytes"`
	// TiedEmbeddings is set when there is no output.weight, so the
	// embedding table is also the output head and is read every token.
	TiedEmbeddings bool `json:"tied_embeddings"`
	// DecodeTokenBytes is what one decode step must touch: the always-needed
	// weights (one embedding row instead of the table, unless tied) plus
	// expert_used_count experts in every MoE layer. It is
	// AlwaysTokenBytes + RoutedTokenBytes.
	DecodeTokenBytes int64 `json:"decode_token_bytes"`
	// AlwaysTokenBytes is the always-needed part of one decode token.
	AlwaysTokenBytes int64 `json:"decode_token_always_bytes"`
	// RoutedTokenBytes is the routed-expert part of one decode token:
	// expert_used_count x one expert's bytes, summed over the MoE layers.
	// It is what a smaller expert quant saves per token when streaming.
	RoutedTokenBytes int64 `json:"decode_token_routed_bytes"`
	// RoutedBitsPerWeight is the routed experts' stored bits per weight,
	// over all their types; RoutedTypes splits it by type.
	RoutedBitsPerWeight float64          `json:"routed_bits_per_weight"`
	RoutedTypes         []routedTypeBits `json:"routed_types"`
}

// routedTypeBits is how much of the routed experts one type stores.
type routedTypeBits struct {
	Type          string  `json:"type"`
	Elements      int64   `json:"elements"`
	Bytes         int64   `json:"bytes"`
	BitsPerWeight float64 `json:"bits_per_weight"`
}

// expertLayerBytes is the size of one routed expert's slices in a layer.
type expertLayerBytes struct {
	Layer int   `json:"layer"`
	Bytes int64 `json:"bytes_per_expert"`
}

func buildInspectReport(f *gguf.File) *inspectReport {
	rep := &inspectReport{Path: f.Path(), Shards: f.Paths(), Version: f.Version(), Arch: f.Arch()}
	for _, kv := range f.KVs() {
		ns, short := splitNamespace(kv.Key, f.Arch())
		switch ns {
		case "arch":
			rep.Hyperparameters = append(rep.Hyperparameters, newInspectKV(short, kv.Value))
		case "general":
			rep.General = append(rep.General, newInspectKV(short, kv.Value))
		case "tokenizer":
			rep.Tokenizer = append(rep.Tokenizer, tokenizerKV(short, kv.Value))
		default:
			rep.Other = append(rep.Other, newInspectKV(kv.Key, kv.Value))
		}
	}
	for _, t := range f.Tensors() {
		rep.Tensors = append(rep.Tensors, inspectTensor{
			Name: t.Name, Type: t.Type.String(), Shape: t.Shape, Bytes: t.Size,
			Shard: t.Shard, Offset: t.Offset, Routed: isRoutedExpert(t),
		})
	}
	rep.Streaming = estimateStreaming(f)
	return rep
}

// splitNamespace returns "arch", "general" or "tokenizer" and the key
// without that prefix, or "" and the whole key.
func splitNamespace(key, arch string) (string, string) {
	if arch != "" && strings.HasPrefix(key, arch+".") {
		return "arch", key[len(arch)+1:]
	}
	for _, ns := range []string{"general", "tokenizer"} {
		if strings.HasPrefix(key, ns+".") {
			return ns, key[len(ns)+1:]
		}
	}
	return "", key
}

func newInspectKV(key string, v gguf.Value) inspectKV {
	return inspectKV{Key: key, Type: valueTypeName(v), Value: jsonValue(v), short: v.String()}
}

// tokenizerKV summarises tokenizer metadata: vocabularies and templates
// are counted, not dumped.
func tokenizerKV(key string, v gguf.Value) inspectKV {
	kv := inspectKV{Key: key, Type: valueTypeName(v)}
	s, isStr := v.V.(string)
	switch {
	case v.Type == gguf.TypeArray:
		kv.Value = map[string]int{"count": v.Len()}
		kv.short = fmt.Sprintf("%d entries", v.Len())
	case isStr && len(s) > 80:
		kv.Value = map[string]int{"bytes": len(s)}
		kv.short = fmt.Sprintf("%s (%d bytes)", clipLine(s, 40), len(s))
	default:
		kv.Value, kv.short = jsonValue(v), v.String()
	}
	return kv
}

// clipLine shows the start of a long text (a chat template) on one line.
func clipLine(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) > n {
		return strconv.Quote(string(r[:n])) + "…"
	}
	return strconv.Quote(string(r))
}

func valueTypeName(v gguf.Value) string {
	if v.Type == gguf.TypeArray {
		return "[]" + v.Elem.String()
	}
	return v.Type.String()
}

// jsonValue makes a metadata value JSON-safe: byte arrays as numbers, not
// base64, and non-finite floats as strings.
func jsonValue(v gguf.Value) any {
	switch x := v.V.(type) {
	case []uint8:
		out := make([]int, len(x))
		for i, b := range x {
			out[i] = int(b)
		}
		return out
	case float32:
		return jsonFloat(float64(x))
	case float64:
		return jsonFloat(x)
	case []float32, []float64:
		fs, _ := v.AsFloats()
		out := make([]any, len(fs))
		for i, f := range fs {
			out[i] = jsonFloat(f)
		}
		return out
	}
	return v.V
}

func jsonFloat(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}

// isRoutedExpert reports whether t holds one slice per routed expert
// (blk.N.ffn_{gate,up,down,gate_up}_exps.weight and their biases): the
// tensors a MoE runtime reads one expert at a time. Shared experts
// (_shexp) and the router (ffn_gate_inp) are always needed.
func isRoutedExpert(t gguf.TensorInfo) bool {
	return strings.Contains(t.Name, "_exps.") && len(t.Shape) >= 2
}

// layerOf parses N from "blk.N.", or returns -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	n, _, _ := strings.Cut(rest, ".")
	i, err := strconv.Atoi(n)
	if err != nil {
		return -1
	}
	return i
}

func estimateStreaming(f *gguf.File) streamingEstimate {
	e := streamingEstimate{
		ExpertCount:     f.Int("expert_count", 0),
		ExpertUsedCount: f.Int("expert_used_count", 0),
	}
	perLayer := map[int]int64{}
	byType := map[quant.Type]*routedTypeBits{}
	var routedElems int64
	for _, t := range f.Tensors() {
		e.TensorBytes += t.Size
		if !isRoutedExpert(t) {
			e.AlwaysBytes += t.Size
			continue
		}
		e.RoutedBytes += t.Size
		rt := byType[t.Type]
		if rt == nil {
			rt = &routedTypeBits{Type: t.Type.String()}
			byType[t.Type] = rt
		}
		rt.Elements += t.Elements()
		rt.Bytes += t.Size
		routedElems += t.Elements()
		// The last dimension counts experts; one expert's slice is an
		// equal share of the tensor.
		perLayer[layerOf(t.Name)] += t.Size / t.Shape[len(t.Shape)-1]
	}
	layers := make([]int, 0, len(perLayer))
	for l := range perLayer {
		layers = append(layers, l)
	}
	sort.Ints(layers)
	e.MoELayers = len(layers)
	for _, l := range layers {
		e.ExpertBytesLayer = append(e.ExpertBytesLayer, expertLayerBytes{l, perLayer[l]})
	}
	e.DecodeTokenBytes = e.AlwaysBytes
	if emb, ok := f.Tensor("token_embd.weight"); ok {
		e.EmbeddingBytes = emb.Size
		if rows := emb.Elements() / emb.Shape[0]; rows > 0 {
			e.EmbeddingRowBytes = emb.Size / rows
		}
		_, hasOutput := f.Tensor("output.weight")
		e.TiedEmbeddings = !hasOutput
		if !e.TiedEmbeddings {
			e.DecodeTokenBytes += e.EmbeddingRowBytes - e.EmbeddingBytes
		}
	}
	e.AlwaysTokenBytes = e.DecodeTokenBytes
	for _, l := range layers {
		e.RoutedTokenBytes += e.ExpertUsedCount * perLayer[l]
	}
	e.DecodeTokenBytes += e.RoutedTokenBytes
	e.RoutedBitsPerWeight = bitsPerWeight(e.RoutedBytes, routedElems)
	for _, rt := range byType {
		rt.BitsPerWeight = bitsPerWeight(rt.Bytes, rt.Elements)
		e.RoutedTypes = append(e.RoutedTypes, *rt)
	}
	// most of the experts' bytes first
	sort.Slice(e.RoutedTypes, func(i, j int) bool {
		a, b := e.RoutedTypes[i], e.RoutedTypes[j]
		return a.Bytes > b.Bytes || (a.Bytes == b.Bytes && a.Type < b.Type)
	})
	return e
}

func bitsPerWeight(bytes, elements int64) float64 {
	if elements == 0 {
		return 0
	}
	return float64(bytes) * 8 / float64(elements)
}

func printInspectReport(w io.Writer, rep *inspectReport) error {
	bw := bufio.NewWriter(w)
	s := rep.Streaming
	fmt.Fprintf(bw, "model         %s\n", rep.Path)
	if len(rep.Shards) > 1 {
		fmt.Fprintf(bw, "shards        %d files\n", len(rep.Shards))
	}
	fmt.Fprintf(bw, "format        GGUF v%d, %d tensors, %s of tensor data\n", rep.Version, len(rep.Tensors), sizeStr(s.TensorBytes))
	fmt.Fprintf(bw, "architecture  %s\n", orNone(rep.Arch))
	printKVs(bw, "general", rep.General)
	printKVs(bw, "hyperparameters ("+rep.Arch+".*)", rep.Hyperparameters)
	printKVs(bw, "tokenizer", rep.Tokenizer)
	printKVs(bw, "other metadata", rep.Other)
	printTensorTable(bw, rep.Tensors, len(rep.Shards) > 1)
	printStreaming(bw, s)
	return bw.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func printKVs(w io.Writer, title string, kvs []inspectKV) {
	if len(kvs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, kv := range kvs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", kv.Key, kv.Type, kv.short)
	}
	tw.Flush()
}

func printTensorTable(w io.Writer, ts []inspectTensor, split bool) {
	rows := [][]string{{"name", "type", "shape", "bytes", "shard"}}
	for _, t := range ts {
		dims := make([]string, len(t.Shape))
		for i, d := range t.Shape {
			dims[i] = strconv.FormatInt(d, 10)
		}
		name := t.Name
		if t.Routed {
			name += " *"
		}
		rows = append(rows, []string{name, t.Type, strings.Join(dims, " x "), sizeStr(t.Bytes), strconv.Itoa(t.Shard + 1)})
	}
	cols := 4
	if split {
		cols = 5
	}
	width := make([]int, cols)
	for _, r := range rows {
		for c := range cols {
			width[c] = max(width[c], len(r[c]))
		}
	}
	fmt.Fprintf(w, "\ntensors\n")
	for _, r := range rows {
		// Names and types read left to right; numbers line up on the right.
		fmt.Fprintf(w, "  %-*s  %-*s  %*s  %*s", width[0], r[0], width[1], r[1], width[2], r[2], width[3], r[3])
		if split {
			fmt.Fprintf(w, "  %*s", width[4], r[4])
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "  (* routed experts)")
}

func printStreaming(w io.Writer, s streamingEstimate) {
	fmt.Fprintf(w, "\nstreaming\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  tensor data\t%s\n", sizeStr(s.TensorBytes))
	fmt.Fprintf(tw, "  always needed\t%s\tdense layers, attention, router, shared experts, norms, embedding, head\n", sizeStr(s.AlwaysBytes))
	fmt.Fprintf(tw, "  routed experts\t%s\t%d experts x %d MoE layers, %d used per token\n", sizeStr(s.RoutedBytes), s.ExpertCount, s.MoELayers, s.ExpertUsedCount)
	if n := len(s.ExpertBytesLayer); n > 0 {
		lo, hi := s.ExpertBytesLayer[0].Bytes, s.ExpertBytesLayer[0].Bytes
		for _, l := range s.ExpertBytesLayer {
			lo, hi = min(lo, l.Bytes), max(hi, l.Bytes)
		}
		per := sizeStr(lo)
		if hi != lo {
			per += " to " + sizeStr(hi)
		}
		fmt.Fprintf(tw, "  one expert, one layer\t%s\tlayers %d..%d\n", per, s.ExpertBytesLayer[0].Layer, s.ExpertBytesLayer[n-1].Layer)
	}
	if len(s.RoutedTypes) > 0 {
		parts := make([]string, len(s.RoutedTypes))
		for i, rt := range s.RoutedTypes {
			parts[i] = fmt.Sprintf("%s %.4g bpw, %.0f%% of the expert bytes", rt.Type, rt.BitsPerWeight, 100*float64(rt.Bytes)/float64(s.RoutedBytes))
		}
		fmt.Fprintf(tw, "  routed bits/weight\t%.4g\t%s\n", s.RoutedBitsPerWeight, strings.Join(parts, "; "))
	}
	emb := "the embedding table counts once as one row"
	if s.TiedEmbeddings {
		emb = "embedding table is also the output head, so all of it"
	} else if s.EmbeddingBytes == 0 {
		emb = "no token_embd.weight"
	}
	fmt.Fprintf(tw, "  one decode token\t%s\talways needed (%s) + %d experts in each MoE layer\n", sizeStr(s.DecodeTokenBytes), emb, s.ExpertUsedCount)
	fmt.Fprintf(tw, "    always needed\t%s\tevery token: dense layers, attention, shared experts, router, head, one embedding row\n", sizeStr(s.AlwaysTokenBytes))
	fmt.Fprintf(tw, "    routed experts\t%s\t%d x one expert x %d MoE layers: what streaming reads per token when no expert is cached\n",
		sizeStr(s.RoutedTokenBytes), s.ExpertUsedCount, s.MoELayers)
	tw.Flush()
}

// sizeStr formats bytes in decimal units, as disk sizes are quoted.
func sizeStr(n int64) string {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	f := float64(n)
	i := 0
	for f >= 1000 && i < len(units)-1 {
		f /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// dumpTensor writes a tensor as little-endian float32, dequantizing a
// bounded number of rows at a time so even a many-GB expert tensor streams.
func dumpTensor(f *gguf.File, name, out string, stdout io.Writer) (err error) {
	t, ok := f.Tensor(name)
	if !ok {
		return fmt.Errorf("%s: no tensor %q", f.Path(), name)
	}
	if !quant.CanDequantize(t.Type) {
		return fmt.Errorf("tensor %q is %s: dequantize of %s is not supported yet", name, t.Type, t.Type)
	}
	data, err := f.TensorData(t)
	if err != nil {
		return err
	}
	rowLen := t.Shape[0]
	rowBytes, err := quant.RowSize(t.Type, rowLen)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", name, err)
	}
	var dst io.Writer = stdout
	if out != "-" {
		file, err := os.Create(out)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := file.Close(); err == nil {
				err = cerr
			}
		}()
		dst = file
	}
	bw := bufio.NewWriterSize(dst, 1<<20)
	rowsPerChunk := max(1, (4<<20)/(4*rowLen))
	vals := make([]float32, rowsPerChunk*rowLen)
	raw := make([]byte, 4*len(vals))
	for off := int64(0); off < int64(len(data)); {
		rows := min(rowsPerChunk, (int64(len(data))-off)/rowBytes)
		n := rows * rowLen
		if err := quant.Dequantize(t.Type, data[off:off+rows*rowBytes], vals[:n]); err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
		for i, v := range vals[:n] {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
		if _, err := bw.Write(raw[:4*n]); err != nil {
			return err
		}
		off += rows * rowBytes
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if out != "-" {
		fmt.Fprintf(stdout, "wrote %d float32 values of %s (%s, shape %v) to %s\n", t.Elements(), name, t.Type, t.Shape, out)
	}
	return nil
}
