package plugin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/k3-inference/k3/core/quant"
)

// Kernels computes ops over shared memory. The core sends a layer's worth of
// ops in one Execute, so the boundary costs one round trip per layer, not
// one per matmul. Inputs, outputs and scratch live in the Arena; weights are
// referenced in regions (shard files or a stager's slots). The core's
// pure-Go ops define every op's semantics and run whatever a plugin does not
// advertise.
type Kernels interface {
	// Describe says which ops, on which weight types, the plugin implements.
	Describe(ctx context.Context) (*KernelsInfo, error)
	// Execute runs req.Ops in order, multi-threaded inside each op, and
	// returns when all outputs are written to the arena.
	Execute(ctx context.Context, req *ExecuteRequest) (*ExecuteResponse, error)
}

// KernelsInfo advertises a Kernels implementation.
type KernelsInfo struct {
	// Name is for the mode line, e.g. "avx512 (vnni)".
	Name string
	Ops  []OpSupport
	// Options are the kernels' options, as for StagerInfo.Options.
	Options []OptionSpec
}

// OpSupport says an op is implemented for the listed weight types (empty:
// the op has no weight operand).
type OpSupport struct {
	Op    string
	Types []quant.Type
}

// ExecuteRequest is a batch of ops over one arena.
type ExecuteRequest struct {
	// Arena is the path of the arena file; plugins map it once per path.
	Arena string
	// Regions are the weight regions WeightRef.Region indexes; plugins map
	// each path once.
	Regions []Region
	// Threads bounds the plugin's parallelism (0: its own choice).
	Threads int
	Ops     []Op
}

// Op is one operation of a batch, in the form it travels in: a name and
// operands, its meaning the core's reference op of the same name. The
// matrix product, the op kernels take, has a typed form: build it with
// MatMul.Op and read it with Op.MatMul rather than through Ints. Ops the
// SDK has no type for yet use the fields directly.
type Op struct {
	Name    string
	Weights []WeightRef
	Inputs  []ArenaRef
	Outputs []ArenaRef
	Ints    []int64
	Floats  []float32
}

// WeightRef is a tensor in a region: Type and Shape (ggml order, Shape[0] is
// the row length) say how to read the bytes at Offset.
type WeightRef struct {
	Region int
	Offset int64
	Type   quant.Type
	Shape  []int64
}

// ArenaRef is a byte range of the arena.
type ArenaRef struct {
	Offset int64
	Size   int64
}

// ExecuteResponse reports how long the batch took inside the plugin, so the
// host can tell compute time from boundary time.
type ExecuteResponse struct {
	Elapsed time.Duration
}

// MatMulOp is the matrix product's Op.Name (the core's ops.OpMatMul).
const MatMulOp = "matmul"

// MatMul is the matrix product: Output holds Rows rows of Weight.Shape[1]
// float32, each the dot products of an Input row (Weight.Shape[0]
// float32) with the weight's rows, as the core's reference computes them.
type MatMul struct {
	// Weight is a matrix of Shape [cols, rows] in a region.
	Weight WeightRef
	// Input and Output are arena ranges of float32 rows.
	Input, Output ArenaRef
	// Rows is the number of activation rows.
	Rows int
	// Transient says the weight is staged for this step only (a routed
	// expert): the plugin drops it from its mappings after the batch
	// (Views.Forget for shard regions), or a page it still maps could not
	// leave the page cache when the stager evicts it.
	Transient bool
	// FastFloat allows float mode fast for F32, F16 and BF16 weights
	// (float32 sums flushed to float64 every 64 elements, within
	// 2^-21·Σ|products| of the exact result). The host sets it only for a
	// plugin that declares the option "float"; false: exact results.
	FastFloat bool
}

// Flags of a matrix product's Ints[1] on the wire: protocol 2 carried
// them there, and the wire has not changed.
const (
	flagTransient int64 = 1 << iota
	flagFastFloat
)

// Op is m in the form an ExecuteRequest carries.
func (m MatMul) Op() Op {
	ints := []int64{int64(m.Rows)}
	var flags int64
	if m.Transient {
		flags |= flagTransient
	}
	if m.FastFloat {
		flags |= flagFastFloat
	}
	if flags != 0 {
		ints = append(ints, flags)
	}
	return Op{Name: MatMulOp, Weights: []WeightRef{m.Weight}, Inputs: []ArenaRef{m.Input}, Outputs: []ArenaRef{m.Output}, Ints: ints}
}

// MatMul reads op as a matrix product, refusing one that is not a
// well-formed one: another op, operands missing, a weight that is not a
// matrix, no rows, flags this SDK does not know.
func (op *Op) MatMul() (MatMul, error) {
	if op.Name != MatMulOp {
		return MatMul{}, fmt.Errorf("%q is not %q", op.Name, MatMulOp)
	}
	if len(op.Weights) != 1 || len(op.Inputs) != 1 || len(op.Outputs) != 1 || len(op.Ints) < 1 || len(op.Ints) > 2 {
		return MatMul{}, errors.New("want 1 weight, 1 input, 1 output and n")
	}
	w := op.Weights[0]
	if len(w.Shape) != 2 || w.Shape[0] <= 0 || w.Shape[1] <= 0 {
		return MatMul{}, fmt.Errorf("weight shape %v is not a matrix", w.Shape)
	}
	n := op.Ints[0]
	if n <= 0 || n > math.MaxInt32 {
		return MatMul{}, fmt.Errorf("%d activation rows", n)
	}
	var flags int64
	if len(op.Ints) > 1 {
		flags = op.Ints[1]
	}
	if flags&^(flagTransient|flagFastFloat) != 0 {
		return MatMul{}, fmt.Errorf("unknown flags %#x", flags)
	}
	return MatMul{Weight: w, Input: op.Inputs[0], Output: op.Outputs[0], Rows: int(n),
		Transient: flags&flagTransient != 0, FastFloat: flags&flagFastFloat != 0}, nil
}
