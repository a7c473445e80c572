package parity

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/k3-inference/k3/core/quant"
)

// QuantizeOptions are llama-quantize's knobs that QuantizeModel passes on.
type QuantizeOptions struct {
	// Imatrix maps tensor names to their importance matrix: per expert, one
	// weight per column (ne[0]*ne[2] values), as llama-imatrix collects
	// them. llama.cpp refuses IQ1/IQ2/IQ3_XXS tensors without one.
	Imatrix map[string][]float32
	// Types overrides the type of tensors whose name matches a regular
	// expression (llama-quantize --tensor-type), e.g. "ffn_.*_exps" -> IQ2_XXS.
	Types map[string]quant.Type
	// Threads for the quantization (default 1).
	Threads int
}

// QuantizeModel runs llama_model_quantize (what llama-quantize does) on the
// GGUF in, writing out with llama_ftype ftype as the base type.
func (r *Ref) QuantizeModel(in, out string, ftype uint32, o QuantizeOptions) error {
	args := []string{"quantize-model", in, out, strconv.FormatUint(uint64(ftype), 10)}
	if o.Imatrix != nil {
		path := filepath.Join(filepath.Dir(out), filepath.Base(out)+".imatrix")
		if err := writeImatrix(path, o.Imatrix); err != nil {
			return err
		}
		defer os.Remove(path)
		args = append(args, "--imatrix", path)
	}
	pats := make([]string, 0, len(o.Types))
	for p := range o.Types {
		pats = append(pats, p)
	}
	sort.Strings(pats)
	for _, p := range pats {
		args = append(args, "--type", p+"="+typeArg(o.Types[p]))
	}
	if o.Threads > 0 {
		args = append(args, "--threads", strconv.Itoa(o.Threads))
	}
	_, err := r.run(nil, args...)
	return err
}

// writeImatrix writes the records k3ref's quantize-model reads: u32 name
// length, name, u32 count, count f32, little-endian.
func writeImatrix(path string, m map[string][]float32) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("parity: imatrix: %w", err)
	}
	w := bufio.NewWriter(f)
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var b [4]byte
	for _, n := range names {
		binary.LittleEndian.PutUint32(b[:], uint32(len(n)))
		w.Write(b[:])
		w.WriteString(n)
		binary.LittleEndian.PutUint32(b[:], uint32(len(m[n])))
		w.Write(b[:])
		for _, v := range m[n] {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
			w.Write(b[:])
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("parity: imatrix: %w", err)
	}
	return f.Close()
}
