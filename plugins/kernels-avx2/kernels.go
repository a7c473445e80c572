package kernelsavx2

// This file is kept identical (but for the package clause) in
// plugins/kernels-avx2 and plugins/kernels-avx512.

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/k3-inference/k3/core/quant"
)

// dotFunc is one weight row (n elements) times one activation row already
// in the weight type's vec-dot type. Lengths are checked by the caller.
type dotFunc func(n int, w, a []byte) float32

// dot4Func is one weight row times four activation rows, astride bytes
// apart, into out; it unpacks each weight block once for the four.
type dot4Func func(n int, w, a []byte, astride int, out *[4]float32)

// level is one instruction-set path. Types it has no kernel for use the
// reference.
type level struct {
	name        string
	dot         map[quant.Type]dotFunc
	dot4        map[quant.Type]dot4Func           // optional, for MatMul
	quantizeQ8K func(x *float32, y *byte, nb int) // nil: reference
}

// levels lists the paths this CPU and build can run, worst first: the
// pure-Go reference always, then what asm_amd64.go's init adds.
var levels = []*level{{name: "generic"}}

// active is the path every call uses: the reference until asm_amd64.go's
// init picks the best path the CPU runs; SetLevel changes it.
var active = levels[0]

// Levels names the paths this CPU and build support, the pure-Go
// reference ("generic") first.
func Levels() []string {
	names := make([]string, len(levels))
	for i, l := range levels {
		names[i] = l.name
	}
	return names
}

// Level names the path in use.
func Level() string { return active.name }

// SetLevel switches every kernel to the named path, e.g. to compare paths
// or to force the reference. It is not safe to call concurrently with
// kernels running.
func SetLevel(name string) error {
	for _, l := range levels {
		if l.name == name {
			active = l
			return nil
		}
	}
	return fmt.Errorf(errPrefix+": level %q not available here (have %s)", name, strings.Join(Levels(), ", "))
}

// Types lists the weight types Dot, MatVec and MatMul accept.
func Types() []quant.Type {
	var ts []quant.Type
	for _, t := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1,
		quant.Q8_0, quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.MXFP4} {
		if quant.CanVecDot(t) && quant.CanQuantize(t.VecDotType()) {
			ts = append(ts, t)
		}
	}
	return ts
}

// Accelerated reports whether the active path has a SIMD kernel for t
// (otherwise t runs on the reference).
func Accelerated(t quant.Type) bool { return active.dot[t] != nil }

// dotOf returns the active kernel for t.
func dotOf(t quant.Type) dotFunc {
	if f := active.dot[t]; f != nil {
		return f
	}
	return func(n int, w, a []byte) float32 { return refDot(t, n, w, a) }
}

// refDot is quant.VecDot on lengths that were already checked.
func refDot(t quant.Type, n int, w, a []byte) float32 {
	s, err := quant.VecDot(t, n, w, a)
	if err != nil {
		panic(err) // unreachable: every caller validated the sizes
	}
	return s
}

// QuantizeActivation quantizes the activation row src to t's vec-dot type
// into dst, exactly as quant.Quantize(t.VecDotType(), src, dst).
func QuantizeActivation(t quant.Type, src []float32, dst []byte) error {
	vt := t.VecDotType()
	need, err := quant.RowSize(vt, int64(len(src)))
	if err != nil {
		return fmt.Errorf(errPrefix+": activation of %s: %w", t, err)
	}
	if int64(len(dst)) < need {
		return fmt.Errorf(errPrefix+": activation of %s: %d elements need %d bytes, have %d", t, len(src), need, len(dst))
	}
	if vt == quant.Q8_K && active.quantizeQ8K != nil && len(src) > 0 {
		active.quantizeQ8K(&src[0], &dst[0], len(src)/quant.QK_K)
		return nil
	}
	return quant.Quantize(vt, src, dst)
}

// Dot returns weight row w (n elements of t) times activation row a (n
// elements of t.VecDotType()).
func Dot(t quant.Type, n int, w, a []byte) (float32, error) {
	if err := checkRows(t, n, len(w), 1, len(a), 1); err != nil {
		return 0, err
	}
	return dotOf(t)(n, w, a), nil
}

// shape is what checkRows needs of a weight type, precomputed so that a
// single-row Dot does not pay for quant's map lookups.
type shape struct {
	ok     bool
	block  int // elements per block
	wbytes int // bytes per weight block
	abytes int // bytes per activation block (of the vec-dot type)
	vt     quant.Type
}

var shapes = func() (s [64]shape) {
	for t := range quant.Type(len(s)) {
		if !quant.CanVecDot(t) {
			continue
		}
		vt := t.VecDotType()
		// Both types' blocks cover the same elements except for the float
		// types, whose "blocks" are single elements.
		ab := vt.TypeSize() * t.BlockSize() / vt.BlockSize()
		s[t] = shape{ok: true, block: t.BlockSize(), wbytes: t.TypeSize(), abytes: ab, vt: vt}
	}
	return s
}()

// checkRows validates rows weight rows and m activation rows of n elements.
func checkRows(t quant.Type, n, wlen, rows, alen, m int) error {
	if int(t) >= len(shapes) || !shapes[t].ok {
		return fmt.Errorf(errPrefix+": no dot product for %s", t)
	}
	sh := &shapes[t]
	if n <= 0 || rows < 0 || m < 0 || n%sh.block != 0 {
		return fmt.Errorf(errPrefix+": bad shape n=%d rows=%d m=%d for %s (block %d)", n, rows, m, t, sh.block)
	}
	nb := uint64(n / sh.block)
	if hi, need := bits.Mul64(nb*uint64(sh.wbytes), uint64(rows)); hi != 0 || uint64(wlen) < need {
		return fmt.Errorf(errPrefix+": %d rows of %d %s need %d weight bytes, have %d", rows, n, t, need, wlen)
	}
	if hi, need := bits.Mul64(nb*uint64(sh.abytes), uint64(m)); hi != 0 || uint64(alen) < need {
		return fmt.Errorf(errPrefix+": %d activation rows of %d %s need %d bytes, have %d", m, n, sh.vt, need, alen)
	}
	return nil
}
