package ops

import (
	"fmt"
	"unsafe"

	"github.com/k3-inference/k3/core/quant"
)

// Matrix is a weight matrix as a GGUF stores it: Rows rows of Cols
// elements of Type, row after row. Data is usually a read-only view of a
// mapped file and is never copied.
type Matrix struct {
	Type       quant.Type
	Rows, Cols int
	Data       []byte
	// Transient says the bytes are a routed expert's, staged for this
	// step only: a backend that maps them in another process drops its
	// mapping after use, so the stager's eviction can free the pages.
	Transient bool
}

// RowBytes is the size of one row.
func (m Matrix) RowBytes() int {
	n, _ := quant.RowSize(m.Type, int64(m.Cols))
	return int(n)
}

// Check reports whether Data holds Rows rows and the type has a dot product.
func (m Matrix) Check() error {
	rb, err := quant.RowSize(m.Type, int64(m.Cols))
	if err != nil {
		return err
	}
	if need := rb * int64(m.Rows); int64(len(m.Data)) < need {
		return fmt.Errorf("ops: %dx%d %s matrix needs %d bytes, have %d", m.Rows, m.Cols, m.Type, need, len(m.Data))
	}
	if !quant.CanVecDot(m.Type) {
		return fmt.Errorf("ops: no dot product for %s weights", m.Type)
	}
	if m.Type.VecDotType() != quant.F32 && !quant.CanQuantize(m.Type.VecDotType()) {
		return fmt.Errorf("ops: cannot quantize activations to %s", m.Type.VecDotType())
	}
	return nil
}

// Slice returns rows [lo, hi) as a matrix of their own (an expert of a
// stacked expert tensor, a head of a per-head tensor).
func (m Matrix) Slice(lo, hi int) Matrix {
	rb := m.RowBytes()
	return Matrix{Type: m.Type, Rows: hi - lo, Cols: m.Cols, Data: m.Data[lo*rb : hi*rb], Transient: m.Transient}
}

// Acts is a batch of activation rows converted to the type a weight's dot
// product reads (its vec_dot_type), as ggml's mul_mat does before it
// multiplies: Q8_K for K-quants, Q8_0 for Q8_0/Q4_0, F16 for F16, F32 for F32.
type Acts struct {
	Type    quant.Type
	N, Cols int
	rowSize int
	data    []byte
	f32     []float32 // Type == F32: the rows themselves
}

// Row returns activation row i in Type's encoding.
func (a *Acts) Row(i int) []byte { return a.data[i*a.rowSize : (i+1)*a.rowSize] }

// QuantizeActs converts n rows of cols floats of x for weights of type wt,
// reusing a's buffers.
func (p *Pool) QuantizeActs(a *Acts, wt quant.Type, x []float32, n, cols int) error {
	vt := wt.VecDotType()
	a.Type, a.N, a.Cols = vt, n, cols
	if vt == quant.F32 {
		a.f32 = x[:n*cols]
		return nil
	}
	rs, err := quant.RowSize(vt, int64(cols))
	if err != nil {
		return fmt.Errorf("ops: activations for %s: %w", wt, err)
	}
	a.rowSize = int(rs)
	if cap(a.data) < n*a.rowSize {
		a.data = make([]byte, n*a.rowSize)
	}
	a.data = a.data[:n*a.rowSize]
	var firstErr error
	p.For(n, 4, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			if err := quant.Quantize(vt, x[i*cols:(i+1)*cols], a.Row(i)); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	})
	return firstErr
}

// MatMul computes out[t*w.Rows+r] = w row r · x row t for n rows of x,
// on p's backend.
func (p *Pool) MatMul(w Matrix, x []float32, n int, out []float32) error {
	return p.MatMuls(MatMulOp{W: w, X: x, N: n, Out: out})
}

// matMulRef is the reference MatMul.
func (p *Pool) matMulRef(w Matrix, x []float32, n int, out []float32) error {
	var a Acts
	if err := p.QuantizeActs(&a, w.Type, x, n, w.Cols); err != nil {
		return err
	}
	return p.MatMulActs(w, &a, out)
}

// MatMulActs is MatMul on activations already converted by QuantizeActs
// for w's type.
func (p *Pool) MatMulActs(w Matrix, a *Acts, out []float32) error {
	if a.Cols != w.Cols || a.Type != w.Type.VecDotType() {
		return fmt.Errorf("ops: %s activations of %d columns for %s weights of %d columns", a.Type, a.Cols, w.Type, w.Cols)
	}
	if err := w.Check(); err != nil {
		return err
	}
	if len(out) < a.N*w.Rows {
		return fmt.Errorf("ops: output of %d for %dx%d", len(out), a.N, w.Rows)
	}
	n, rows := a.N, w.Rows
	if w.Type == quant.F32 {
		wf := f32View(w.Data[:rows*w.Cols*4])
		p.For(rows, 16, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				wr := wf[r*w.Cols : (r+1)*w.Cols]
				for t := 0; t < n; t++ {
					out[t*rows+r] = dotF32(wr, a.f32[t*w.Cols:(t+1)*w.Cols])
				}
			}
		})
		return nil
	}
	rb := w.RowBytes()
	p.For(rows, 16, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			wr := w.Data[r*rb : (r+1)*rb]
			for t := 0; t < n; t++ {
				// Sizes were checked above, so VecDot cannot fail here.
				out[t*rows+r], _ = quant.VecDot(w.Type, w.Cols, wr, a.Row(t))
			}
		}
	})
	return nil
}

// f32View reinterprets little-endian float32 bytes without copying; GGUF
// tensor data is aligned, so the view is too.
func f32View(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// F32View exposes f32View for float tensors read straight from a mapping.
func F32View(b []byte) []float32 { return f32View(b) }

// dotF32 is ggml's scalar ggml_vec_dot_f32: float32 products summed in double.
func dotF32(x, y []float32) float32 {
	y = y[:len(x)]
	var s float64
	for i, v := range x {
		s += float64(float32(v * y[i]))
	}
	return float32(s)
}
