package model

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/quant"
)

// Tensor is a bound weight: its file entry and a view of its bytes.
type Tensor struct {
	gguf.TensorInfo
	Data []byte
}

// Dims returns the shape with trailing ones dropped, so that a conv
// weight stored as [k, 1, c, 1] and one stored as [k, 1, c] compare equal
// (llama.cpp accepts both).
func (t *Tensor) Dims() []int64 {
	s := t.Shape
	for len(s) > 1 && s[len(s)-1] == 1 {
		s = s[:len(s)-1]
	}
	return s
}

// CheckShape reports a tensor whose shape (ggml order, trailing ones
// ignored) is not want.
func (t *Tensor) CheckShape(want ...int64) error {
	for len(want) > 1 && want[len(want)-1] == 1 {
		want = want[:len(want)-1]
	}
	got := t.Dims()
	if len(got) != len(want) {
		return fmt.Errorf("tensor %q: shape %v, want %v", t.Name, t.Shape, want)
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("tensor %q: shape %v, want %v", t.Name, t.Shape, want)
		}
	}
	return nil
}

// Floats returns the tensor's values as float32: a view for F32 tensors, a
// dequantized copy otherwise. Meant for small tensors (norms, biases,
// convolution kernels), never for matrices.
func (t *Tensor) Floats() ([]float32, error) {
	n := t.Elements()
	if t.Type == quant.F32 {
		return f32View(t.Data[:4*n]), nil
	}
	out := make([]float32, n)
	if err := quant.Dequantize(t.Type, t.Data, out); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	return out, nil
}

// TensorName is the tensor a field tag names under prefix, and whether the
// tag marks it optional (see Bind).
func TensorName(prefix, tag string) (name string, optional bool) {
	name, opts, _ := strings.Cut(tag, ",")
	if !strings.Contains(name, ".") && !strings.Contains(opts, "bare") {
		name += ".weight"
	}
	return prefix + name, strings.Contains(opts, "optional")
}

// Bind fills the *Tensor fields of the struct dst points to from w. Each
// field's tag names its tensor relative to prefix: `gguf:"attn_norm"` binds
// prefix+"attn_norm.weight"; a name with a dot is taken as is
// (`gguf:"exp_probs_b.bias"`); ",bare" takes the name without a suffix
// (llama.cpp's blk.N.ssm_a); ",optional" leaves the field nil when the
// tensor is absent. All missing required tensors are reported together.
func Bind(w Weights, prefix string, dst any) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("model: Bind needs a pointer to a struct, got %T", dst)
	}
	v = v.Elem()
	tensorType := reflect.TypeFor[*Tensor]()
	var errs []error
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		tag, ok := f.Tag.Lookup("gguf")
		if !ok || f.Type != tensorType {
			continue
		}
		name, optional := TensorName(prefix, tag)
		info, ok := w.Tensor(name)
		if !ok {
			if !optional {
				errs = append(errs, fmt.Errorf("missing tensor %q", name))
			}
			continue
		}
		data, err := w.TensorData(info)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		v.Field(i).Set(reflect.ValueOf(&Tensor{TensorInfo: info, Data: data}))
	}
	return errors.Join(errs...)
}

// Matrix is the tensor as the left operand of a matrix product: a row per
// slice of its first dimension.
func (t *Tensor) Matrix() ops.Matrix {
	return ops.Matrix{Type: t.Type, Rows: int(t.Elements() / t.Shape[0]), Cols: int(t.Shape[0]), Data: t.Data}
}
