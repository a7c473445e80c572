// Package quant defines the GGML tensor types k3 reads and writes: block
// layouts, dequantization, reference quantization (ggml's
// quantize_row_*_ref) and reference dot products (ggml's generic vec_dot).
//
// Everything here is plain Go and is the semantics every SIMD kernel is held
// to. Each type's functions live in their own file and register themselves
// in init; this file holds the type table and the public entry points.
package quant

import (
	"fmt"
	"math"
	"strings"
)

// Type is a ggml_type value as stored in GGUF tensor infos.
type Type uint32

// The ggml_type values (ggml/include/ggml.h). Only the ones with a row in
// traitsTable are supported by k3.
const (
	F32   Type = 0
	F16   Type = 1
	Q4_0  Type = 2
	Q4_1  Type = 3
	Q5_0  Type = 6
	Q5_1  Type = 7
	Q8_0  Type = 8
	Q8_1  Type = 9
	Q2_K  Type = 10
	Q3_K  Type = 11
	Q4_K  Type = 12
	Q5_K  Type = 13
	Q6_K  Type = 14
	Q8_K  Type = 15
	I8    Type = 24
	I16   Type = 25
	I32   Type = 26
	I64   Type = 27
	F64   Type = 28
	BF16  Type = 30
	MXFP4 Type = 39

	// Non-linear and ternary types (iq4.go, tq.go).
	IQ4_NL Type = 20
	IQ4_XS Type = 23
	TQ1_0  Type = 34
	TQ2_0  Type = 35
	// The grid-based IQ types (iq1.go, iq2.go, iq3.go).
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ1_M   Type = 29
)

// QK_K is the super-block size of the K-quants.
const QK_K = 256

// Traits describes a type's block layout.
type Traits struct {
	Name      string
	BlockSize int  // elements per block
	TypeSize  int  // bytes per block
	Quantized bool // false for plain float/int element types
	// VecDotType is the type the activation row is quantized to for the
	// reference dot product (ggml's vec_dot_type), e.g. Q8_K for K-quants.
	VecDotType Type
}

var traitsTable = map[Type]Traits{
	F32:   {"f32", 1, 4, false, F32},
	F16:   {"f16", 1, 2, false, F16},
	BF16:  {"bf16", 1, 2, false, BF16},
	Q4_0:  {"q4_0", 32, 18, true, Q8_0},
	Q4_1:  {"q4_1", 32, 20, true, Q8_1},
	Q5_0:  {"q5_0", 32, 22, true, Q8_0},
	Q5_1:  {"q5_1", 32, 24, true, Q8_1},
	Q8_0:  {"q8_0", 32, 34, true, Q8_0},
	Q8_1:  {"q8_1", 32, 36, true, Q8_1},
	Q2_K:  {"q2_K", QK_K, 84, true, Q8_K},
	Q3_K:  {"q3_K", QK_K, 110, true, Q8_K},
	Q4_K:  {"q4_K", QK_K, 144, true, Q8_K},
	Q5_K:  {"q5_K", QK_K, 176, true, Q8_K},
	Q6_K:  {"q6_K", QK_K, 210, true, Q8_K},
	Q8_K:  {"q8_K", QK_K, 292, true, Q8_K},
	I8:    {"i8", 1, 1, false, I8},
	I16:   {"i16", 1, 2, false, I16},
	I32:   {"i32", 1, 4, false, I32},
	I64:   {"i64", 1, 8, false, I64},
	F64:   {"f64", 1, 8, false, F64},
	MXFP4: {"mxfp4", 32, 17, true, Q8_0},

	IQ4_NL:  {"iq4_nl", 32, 18, true, Q8_0},
	IQ4_XS:  {"iq4_xs", QK_K, 136, true, Q8_K},
	TQ1_0:   {"tq1_0", QK_K, 54, true, Q8_K},
	TQ2_0:   {"tq2_0", QK_K, 66, true, Q8_K},
	IQ2_XXS: {"iq2_xxs", QK_K, 66, true, Q8_K},
	IQ2_XS:  {"iq2_xs", QK_K, 74, true, Q8_K},
	IQ2_S:   {"iq2_s", QK_K, 82, true, Q8_K},
	IQ3_XXS: {"iq3_xxs", QK_K, 98, true, Q8_K},
	IQ3_S:   {"iq3_s", QK_K, 110, true, Q8_K},
	IQ1_S:   {"iq1_s", QK_K, 50, true, Q8_K},
	IQ1_M:   {"iq1_m", QK_K, 56, true, Q8_K},
}

// Known reports whether k3 knows t's block layout.
func (t Type) Known() bool { _, ok := traitsTable[t]; return ok }

// Traits returns t's layout; ok is false for unknown types.
func (t Type) Traits() (Traits, bool) { tr, ok := traitsTable[t]; return tr, ok }

// BlockSize is the number of elements per block (1 for plain types, 0 if unknown).
func (t Type) BlockSize() int { return traitsTable[t].BlockSize }

// TypeSize is the number of bytes per block (0 if unknown).
func (t Type) TypeSize() int { return traitsTable[t].TypeSize }

// VecDotType is the activation type of t's reference dot product.
func (t Type) VecDotType() Type { return traitsTable[t].VecDotType }

func (t Type) String() string {
	if tr, ok := traitsTable[t]; ok {
		return tr.Name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// ParseType maps a ggml type name ("q2_K", "Q4_0", "f16", ...) to its Type,
// case-insensitively.
func ParseType(s string) (Type, error) {
	for t, tr := range traitsTable {
		if strings.EqualFold(tr.Name, s) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("quant: unknown tensor type %q", s)
}

// RowSize returns the bytes of n consecutive elements of type t. It fails if
// t is unknown, n is not a whole number of blocks, or the size overflows int64.
func RowSize(t Type, n int64) (int64, error) {
	tr, ok := traitsTable[t]
	if !ok {
		return 0, fmt.Errorf("quant: unknown tensor type %d", uint32(t))
	}
	if n < 0 {
		return 0, fmt.Errorf("quant: negative element count %d", n)
	}
	if n%int64(tr.BlockSize) != 0 {
		return 0, fmt.Errorf("quant: %d elements is not a multiple of %s's block size %d", n, tr.Name, tr.BlockSize)
	}
	blocks := n / int64(tr.BlockSize)
	if blocks > math.MaxInt64/int64(tr.TypeSize) {
		return 0, fmt.Errorf("quant: %d elements of %s overflow int64 bytes", n, tr.Name)
	}
	return blocks * int64(tr.TypeSize), nil
}

// impl holds one type's reference functions. Any field may be nil when the
// type does not support that operation.
type impl struct {
	// dequantize decodes len(dst) elements from src (whole blocks).
	dequantize func(src []byte, dst []float32)
	// quantize encodes src (whole blocks) into dst, as ggml's
	// quantize_row_*_ref (what ggml_quantize_chunk does without an imatrix).
	quantize func(src []float32, dst []byte)
	// vecDot returns the dot product of n elements of a weight row w of this
	// type with an activation row a of type VecDotType, as ggml's generic
	// (scalar) vec_dot does it.
	vecDot func(n int, w, a []byte) float32
	// quantizeImatrix encodes one row as ggml_quantize_chunk does with
	// importance weights qw (one per element of the row; nil: none), for
	// the types whose quantizer reads them (QuantizeImatrix).
	quantizeImatrix func(src []float32, dst []byte, qw []float32)
}

var impls = map[Type]*impl{}

// register installs a type's functions; called from each type's init.
func register(t Type, im *impl) {
	if _, ok := traitsTable[t]; !ok {
		panic(fmt.Sprintf("quant: register of unknown type %d", t))
	}
	if _, dup := impls[t]; dup {
		panic(fmt.Sprintf("quant: %s registered twice", t))
	}
	impls[t] = im
}

func checkSizes(t Type, n int, nbytes int, what string) error {
	need, err := RowSize(t, int64(n))
	if err != nil {
		return err
	}
	if int64(nbytes) < need {
		return fmt.Errorf("quant: %s: %d elements of %s need %d bytes, have %d", what, n, t, need, nbytes)
	}
	return nil
}

// Dequantize decodes len(dst) elements of type t from src into dst.
func Dequantize(t Type, src []byte, dst []float32) error {
	im := impls[t]
	if im == nil || im.dequantize == nil {
		return fmt.Errorf("quant: dequantize of %s is not supported", t)
	}
	if err := checkSizes(t, len(dst), len(src), "dequantize"); err != nil {
		return err
	}
	im.dequantize(src, dst)
	return nil
}

// Quantize encodes src as type t into dst with the reference algorithm.
func Quantize(t Type, src []float32, dst []byte) error {
	im := impls[t]
	if im == nil || im.quantize == nil {
		return fmt.Errorf("quant: quantize to %s is not supported", t)
	}
	if err := checkSizes(t, len(src), len(dst), "quantize"); err != nil {
		return err
	}
	im.quantize(src, dst)
	return nil
}

// VecDot returns the reference dot product of n elements of weight row w
// (type t) with activation row a, already quantized to t.VecDotType().
func VecDot(t Type, n int, w, a []byte) (float32, error) {
	im := impls[t]
	if im == nil || im.vecDot == nil {
		return 0, fmt.Errorf("quant: vec_dot of %s is not supported", t)
	}
	if err := checkSizes(t, n, len(w), "vec_dot weights"); err != nil {
		return 0, err
	}
	if err := checkSizes(t.VecDotType(), n, len(a), "vec_dot activations"); err != nil {
		return 0, err
	}
	return im.vecDot(n, w, a), nil
}

// CanDequantize, CanQuantize and CanVecDot report which operations t supports.
func CanDequantize(t Type) bool { im := impls[t]; return im != nil && im.dequantize != nil }
func CanQuantize(t Type) bool   { im := impls[t]; return im != nil && im.quantize != nil }
func CanVecDot(t Type) bool     { im := impls[t]; return im != nil && im.vecDot != nil }
