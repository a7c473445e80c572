package parity

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/k3-inference/k3/core/quant"
)

// Dequantize decodes n elements of type typ with ggml's to_float (libggml-base).
// data must hold exactly n elements.
func (r *Ref) Dequantize(typ quant.Type, n int, data []byte) ([]float32, error) {
	out, err := r.run(bytes.NewReader(data), "dequant", typeArg(typ), strconv.Itoa(n))
	if err != nil {
		return nil, err
	}
	return floats(out, n)
}

// Quantize encodes src, rows of nPerRow elements, as ggml_quantize_chunk does
// without an importance matrix (the path llama-quantize takes).
func (r *Ref) Quantize(typ quant.Type, src []float32, nPerRow int) ([]byte, error) {
	return r.run(floatReader(src), "quantize", typeArg(typ), strconv.Itoa(nPerRow))
}

// QuantizeImatrix is Quantize with an importance matrix: imatrix holds
// nPerRow weights, one per column, as llama-quantize passes them to
// ggml_quantize_chunk.
func (r *Ref) QuantizeImatrix(typ quant.Type, src []float32, nPerRow int, imatrix []float32) ([]byte, error) {
	if len(imatrix) != nPerRow {
		return nil, fmt.Errorf("parity: importance matrix of %d weights for rows of %d", len(imatrix), nPerRow)
	}
	return r.run(io.MultiReader(floatReader(imatrix), floatReader(src)), "quantize", typeArg(typ), strconv.Itoa(nPerRow), "imatrix")
}

// FromFloat converts src with the CPU backend's from_float for typ, the
// activation quantization of the matrix multiply (e.g. Q8_K, Q8_0), in the
// given CPU variant (Generic, Native, or a variant name).
func (r *Ref) FromFloat(typ quant.Type, src []float32, variant string) ([]byte, error) {
	return r.run(floatReader(src), "from_float", typeArg(typ), variant)
}

// VecDot returns, for each of rows row pairs, the CPU backend's vec_dot of n
// elements of weight row i of w (type typ) with activation row i of a (typ's
// vec_dot_type in that variant, e.g. Q8_K for K-quants), as the given CPU
// variant computes it. Generic is ggml's scalar C code.
func (r *Ref) VecDot(typ quant.Type, n, rows int, w, a []byte, variant string) ([]float32, error) {
	in := io.MultiReader(bytes.NewReader(w), bytes.NewReader(a))
	out, err := r.run(in, "vecdot", typeArg(typ), strconv.Itoa(n), strconv.Itoa(rows), variant)
	if err != nil {
		return nil, err
	}
	return floats(out, rows)
}

// Variants describes the CPU backend variants next to the libraries.
type Variants struct {
	LibDir   string `json:"libdir"`
	Native   string `json:"native"` // the variant Native selects on this CPU
	Variants []struct {
		Name  string `json:"name"`
		Score int    `json:"score"` // 0: this CPU cannot run it
	} `json:"variants"`
}

// Variants lists the CPU variants, their ggml_backend_score on this CPU and
// which one Native means here.
func (r *Ref) Variants() (*Variants, error) {
	var v Variants
	if err := r.runJSON(&v, nil, "variants"); err != nil {
		return nil, err
	}
	return &v, nil
}

// TypeInfo is one ggml type as libggml-base and a CPU variant describe it.
type TypeInfo struct {
	Type            quant.Type `json:"type"`
	Name            string     `json:"name"`
	BlockSize       int        `json:"block_size"`
	TypeSize        int        `json:"type_size"`
	Quantized       bool       `json:"quantized"`
	ToFloat         bool       `json:"to_float"`
	FromFloatRef    bool       `json:"from_float_ref"`
	QuantizeChunk   bool       `json:"quantize_chunk"` // Quantize supports it
	RequiresImatrix bool       `json:"requires_imatrix"`
	FromFloat       bool       `json:"from_float"`
	VecDot          bool       `json:"vec_dot"`
	VecDotType      quant.Type `json:"vec_dot_type"`
	NRows           int        `json:"nrows"`
}

// Types lists every ggml type with its traits in the given CPU variant.
func (r *Ref) Types(variant string) ([]TypeInfo, error) {
	var v struct {
		Types []TypeInfo `json:"types"`
	}
	if err := r.runJSON(&v, nil, "types", variant); err != nil {
		return nil, err
	}
	return v.Types, nil
}

func typeArg(t quant.Type) string { return strconv.FormatUint(uint64(t), 10) }

func floatReader(src []float32) io.Reader {
	b := make([]byte, 4*len(src))
	for i, f := range src {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return bytes.NewReader(b)
}

func floats(b []byte, n int) ([]float32, error) {
	if len(b) != 4*n {
		return nil, fmt.Errorf("parity: k3ref returned %d bytes, want %d floats", len(b), n)
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}
