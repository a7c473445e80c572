package ops

import "fmt"

// OpMatMul is the name kernels plugins advertise and execute for MatMul:
// Weights[0] is the matrix (Shape [Cols, Rows]), Inputs[0] N rows of Cols
// float32 activations, Outputs[0] N rows of Rows float32 results, Ints[0]
// is N. Activations are converted to the weight type's vec_dot_type as
// QuantizeActs does, so the integer part of every block product is the
// reference's.
const OpMatMul = "matmul"

// MatMulOp is one matrix product of a batch: Out[t*W.Rows+r] = W row r ·
// X row t for t < N.
type MatMulOp struct {
	W   Matrix
	X   []float32
	N   int
	Out []float32
}

// Backend runs the matrix products of a forward pass: the core's reference
// (the default), SIMD kernels in this process, or a kernels plugin in
// another one. Which one is chosen when the model is loaded.
type Backend interface {
	// Name is for the mode line, e.g. "reference" or "avx512 (vnni256)".
	Name() string
	// MatMuls runs independent products (no op reads another's output),
	// one round trip for all of them where the backend is remote.
	MatMuls(p *Pool, batch []MatMulOp) error
	// Scratch returns working memory for one forward pass that the backend
	// can hand to its kernels without copying (for a plugin: its arena).
	Scratch() *Scratch
}

// Reference is the core's pure-Go backend: it defines what every other
// backend computes.
var Reference Backend = reference{}

type reference struct{}

func (reference) Name() string { return "reference" }

func (reference) MatMuls(p *Pool, batch []MatMulOp) error {
	for i := range batch {
		op := &batch[i]
		if err := p.matMulRef(op.W, op.X, op.N, op.Out); err != nil {
			return err
		}
	}
	return nil
}

func (reference) Scratch() *Scratch { return &Scratch{} }

// Check reports whether op's buffers fit its shapes.
func (op *MatMulOp) Check() error {
	if err := op.W.Check(); err != nil {
		return err
	}
	if op.N < 0 || len(op.X) < op.N*op.W.Cols || len(op.Out) < op.N*op.W.Rows {
		return fmt.Errorf("ops: %d rows of %dx%d %s product: input %d, output %d", op.N, op.W.Rows, op.W.Cols, op.W.Type, len(op.X), len(op.Out))
	}
	return nil
}

// SetBackend makes p's matrix products run on b (nil: the reference).
func (p *Pool) SetBackend(b Backend) {
	if b == nil {
		b = Reference
	}
	p.backend = b
}

// Backend is the backend p's matrix products run on.
func (p *Pool) Backend() Backend {
	if p.backend == nil {
		return Reference
	}
	return p.backend
}

// MatMuls runs a batch of independent matrix products on p's backend.
func (p *Pool) MatMuls(batch ...MatMulOp) error {
	if len(batch) == 0 {
		return nil
	}
	return p.Backend().MatMuls(p, batch)
}

// Scratch is a pass's working memory for the inputs and outputs of matrix
// products: a bump allocator over memory the backend chose (a plugin's
// arena), so the products need no copies. Reset reuses it; when it is
// full, or has no memory at all (the reference), Floats falls back to the
// Go heap and the backend copies what it must.
type Scratch struct {
	mem     []float32
	off     int
	release func() // returns mem to the backend
}

// NewScratch wraps mem; release, if not nil, is called by Close.
func NewScratch(mem []float32, release func()) *Scratch {
	return &Scratch{mem: mem, release: release}
}

// Floats returns n zeroed floats, 64-byte aligned within the scratch.
func (s *Scratch) Floats(n int) []float32 {
	if s == nil || s.off+n > len(s.mem) {
		return make([]float32, n)
	}
	b := s.mem[s.off : s.off+n : s.off+n]
	s.off += (n + 15) &^ 15
	clear(b)
	return b
}

// Reset makes all of the scratch free again; nothing Floats returned
// before may be used after it.
func (s *Scratch) Reset() {
	if s != nil {
		s.off = 0
	}
}

// Mark is where the next Floats starts; Rewind(Mark()) gives back
// everything Floats returned after it, so a step whose buffers do not
// outlive it (a group of experts) reuses the same memory.
func (s *Scratch) Mark() int {
	if s == nil {
		return 0
	}
	return s.off
}

// Rewind frees what Floats returned since Mark returned m.
func (s *Scratch) Rewind(m int) {
	if s != nil && m <= s.off {
		s.off = m
	}
}

// Close gives the memory back to the backend.
func (s *Scratch) Close() {
	if s == nil {
		return
	}
	if s.release != nil {
		s.release()
	}
	s.mem, s.off, s.release = nil, 0, nil
}
