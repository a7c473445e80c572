package plugin

import (
	"context"
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

// Op is one operation. Its meaning (operand order, what Ints and Floats
// hold) is the core's reference op of the same name.
//
// For "matmul", Ints[0] is the number of activation rows and an optional
// Ints[1] holds flags. OpTransient says the weights are transient (a
// routed expert staged for this step only), so the plugin drops them from
// its mappings after the batch (plugin.Views.Forget for shard regions) — a
// page still mapped by the plugin cannot leave the page cache when the
// stager evicts it. OpFastFloat allows float mode fast for F32, F16 and
// BF16 weights (kernelkit's fastfloat.go: float32 sums flushed to float64
// every 64 elements, within 2^-21·Σ|products| of the exact result, the
// same bits on every level; a plugin built before F32 had a fast mode
// keeps F32 exact). 0 or absent: keep the weights mapped, exact
// results. A plugin that reads only Ints[0] computes exact results and
// keeps the pages mapped (the kernelkit plugins built before the flags
// existed rejected any second value).
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

// Flags of a "matmul" op's Ints[1] (see Op).
const (
	OpTransient int64 = 1 << iota
	OpFastFloat
)
