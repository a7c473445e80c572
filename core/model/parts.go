package model

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/k3-inference/k3/core/ops"
	"github.com/k3-inference/k3/core/quant"
)

// ShapeCheck is a shape llama.cpp's loader requires of a bound tensor; a
// nil T is skipped (a missing required tensor is reported by Need).
type ShapeCheck struct {
	T     *Tensor
	Shape []int64
}

// Need returns an error naming the tensors of part (a pointer to a struct
// of tagged tensor fields, bound under blk.<il>.) whose fields are nil.
func Need(il int, part any, fields ...string) error {
	var missing []string
	v := reflect.ValueOf(part).Elem()
	for _, f := range fields {
		if v.FieldByName(f).IsNil() {
			sf, _ := v.Type().FieldByName(f)
			name, _ := TensorName(fmt.Sprintf("blk.%d.", il), sf.Tag.Get("gguf"))
			missing = append(missing, strconv.Quote(name))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("layer %d: missing tensors %s", il, strings.Join(missing, ", "))
	}
	return nil
}

// Work is a forward call's matrix products: the pool that runs them and
// the scratch their outputs live in (reset by the caller, usually once
// per layer, so nothing taken from it outlives a layer).
type Work struct {
	Pool *ops.Pool
	Sc   *ops.Scratch
}

// Buf is working memory from the scratch.
func (w Work) Buf(n int) []float32 { return w.Sc.Floats(n) }

// MatMul multiplies x (rows of t's column count) by t.
func (w Work) MatMul(t *Tensor, x []float32, rows int) ([]float32, error) {
	m := t.Matrix()
	out := w.Buf(rows * m.Rows)
	if err := w.Pool.MatMul(m, x, rows, out); err != nil {
		return nil, fmt.Errorf("%s: %w", t.Name, err)
	}
	return out, nil
}

// MatMuls multiplies x by each of ts in one batch (one round trip to a
// kernels plugin); a nil tensor gives a nil output.
func (w Work) MatMuls(x []float32, rows int, ts ...*Tensor) ([][]float32, error) {
	outs := make([][]float32, len(ts))
	batch := make([]ops.MatMulOp, 0, len(ts))
	for i, t := range ts {
		if t == nil {
			continue
		}
		m := t.Matrix()
		outs[i] = w.Buf(rows * m.Rows)
		batch = append(batch, ops.MatMulOp{W: m, X: x, N: rows, Out: outs[i]})
	}
	if err := w.Pool.MatMuls(batch...); err != nil {
		var names []string
		for _, t := range ts {
			if t != nil {
				names = append(names, t.Name)
			}
		}
		return nil, fmt.Errorf("%v: %w", names, err)
	}
	return outs, nil
}

// Embed returns the rows of the token embedding t (n_embd × n_vocab) for
// tokens, dequantized.
func Embed(t *Tensor, tokens []int32) ([]float32, error) {
	e, vocab := int(t.Shape[0]), int(t.Shape[1])
	rb, err := quant.RowSize(t.Type, int64(e))
	if err != nil {
		return nil, err
	}
	x := make([]float32, len(tokens)*e)
	for i, tok := range tokens {
		if tok < 0 || int(tok) >= vocab {
			return nil, fmt.Errorf("token %d out of range [0, %d)", tok, vocab)
		}
		row := t.Data[int64(tok)*rb : int64(tok+1)*rb]
		if err := quant.Dequantize(t.Type, row, x[i*e:(i+1)*e]); err != nil {
			return nil, fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	return x, nil
}
