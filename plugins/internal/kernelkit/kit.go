// Package kernelkit is what k3's kernel plugins (plugins/kernels-avx2,
// plugins/kernels-avx512) share: the instruction-set levels and the switch
// between them, the checked entry points (QuantizeActivation, Dot, MatVec,
// MatMul), the row threading and the plugin.Kernels implementation over the
// arena. A plugin package brings only its generated assembly and a Funcs
// table per level it adds (after checking the CPU runs it); its tests run
// the suite in kernelkit/kerneltest against its Kit.
//
// Every kernel has core/quant's pure-Go reference as fallback and test
// oracle: every Kit starts with the "generic" level, which is the
// reference, and a type a level has no kernel for runs on the reference.
package kernelkit

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

// rows8Func is eight weight rows (n elements each, wrow bytes apart) times
// one activation row into out, each bit-identical to the level's dotFunc.
type rows8Func func(n int, w []byte, wrow int, a []byte, out *[8]float32)

// level is one instruction-set path. Types it has no kernel for use the
// reference.
type level struct {
	name        string
	dot         map[quant.Type]dotFunc
	dot4        map[quant.Type]dot4Func           // optional, for MatMul
	dotFew      map[quant.Type][4]dot4Func        // optional: [2], [3]: MatMul's tails of two and three Q8_K rows
	rows8       map[quant.Type]rows8Func          // optional, for MatVec
	prep        map[quant.Type]*prepared          // optional: kernels on prepared rows
	fprep       map[quant.Type]*floatPrep         // the plain float types' prepared rows
	fast        map[quant.Type]*fastPrep          // F32/F16/BF16 in float mode fast (nil: fastSum in Go)
	prep4       map[quant.Type]*prepared4         // optional: MatMul's four-row kernels on compact prepared rows
	quantizeQ8K func(x *float32, y *byte, nb int) // nil: reference
}

// Kit is one kernel plugin's set of levels and the level in use. Its
// methods are the plugin package's API.
type Kit struct {
	name   string   // the package name, which starts every error
	levels []*level // worst first: the reference, then what Add added
	active *level
	// fastFloat is float mode fast (fastfloat.go) for MatVec, MatMul and
	// Dot; the plugin sets it per op.
	fastFloat bool
}

// New returns a Kit with only the reference level ("generic"); name (the
// plugin's package name, e.g. "kernelsavx2") starts its errors, and without
// its "kernels" prefix names the plugin in Describe.
func New(name string) *Kit {
	k := &Kit{name: name, levels: []*level{{name: "generic"}}}
	k.active = k.levels[0]
	return k
}

// Levels names the paths this CPU and build support, the pure-Go
// reference ("generic") first.
func (k *Kit) Levels() []string {
	names := make([]string, len(k.levels))
	for i, l := range k.levels {
		names[i] = l.name
	}
	return names
}

// Level names the path in use.
func (k *Kit) Level() string { return k.active.name }

// SetLevel switches every kernel to the named path, e.g. to compare paths
// or to force the reference. It is not safe to call concurrently with
// kernels running.
func (k *Kit) SetLevel(name string) error {
	for _, l := range k.levels {
		if l.name == name {
			k.active = l
			return nil
		}
	}
	return fmt.Errorf("%s: level %q not available here (have %s)", k.name, name, strings.Join(k.Levels(), ", "))
}

// Types lists the weight types Dot, MatVec and MatMul accept.
func Types() []quant.Type {
	var ts []quant.Type
	for _, t := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1,
		quant.Q8_0, quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.MXFP4,
		quant.IQ4_NL, quant.IQ4_XS, quant.TQ1_0, quant.TQ2_0,
		quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S,
		quant.IQ3_XXS, quant.IQ3_S, quant.IQ1_S, quant.IQ1_M} {
		if quant.CanVecDot(t) && quant.CanQuantize(t.VecDotType()) {
			ts = append(ts, t)
		}
	}
	return ts
}

// Accelerated reports whether the active path has a SIMD kernel for t
// (otherwise t runs on the reference).
func (k *Kit) Accelerated(t quant.Type) bool { return k.active.dot[t] != nil }

// DotFunc returns the active path's kernel for t without Dot's size
// checks: w and a must hold n elements. For benchmarks of the kernel alone.
func (k *Kit) DotFunc(t quant.Type) func(n int, w, a []byte) float32 {
	return k.active.dotOf(t)
}

// dotOf returns l's kernel for t.
func (l *level) dotOf(t quant.Type) dotFunc {
	if f := l.dot[t]; f != nil {
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
func (k *Kit) QuantizeActivation(t quant.Type, src []float32, dst []byte) error {
	vt := t.VecDotType()
	need, err := quant.RowSize(vt, int64(len(src)))
	if err != nil {
		return fmt.Errorf("%s: activation of %s: %w", k.name, t, err)
	}
	if int64(len(dst)) < need {
		return fmt.Errorf("%s: activation of %s: %d elements need %d bytes, have %d", k.name, t, len(src), need, len(dst))
	}
	if q := k.active.quantizeQ8K; vt == quant.Q8_K && q != nil && len(src) > 0 {
		q(&src[0], &dst[0], len(src)/quant.QK_K)
		return nil
	}
	return quant.Quantize(vt, src, dst)
}

// Dot returns weight row w (n elements of t) times activation row a (n
// elements of t.VecDotType()).
func (k *Kit) Dot(t quant.Type, n int, w, a []byte) (float32, error) {
	if err := k.checkRows(t, n, len(w), 1, len(a), 1); err != nil {
		return 0, err
	}
	if k.fastFloat && fastType(t) {
		return k.active.fastOf(t).dotFunc()(n, w, a), nil
	}
	return k.active.dotOf(t)(n, w, a), nil
}

// fastOf returns l's float mode fast for t (F32, F16 or BF16).
func (l *level) fastOf(t quant.Type) *fastPrep {
	if p := l.fast[t]; p != nil {
		return p
	}
	return newFastPrep(t, nil, 1)
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
func (k *Kit) checkRows(t quant.Type, n, wlen, rows, alen, m int) error {
	if int(t) >= len(shapes) || !shapes[t].ok {
		return fmt.Errorf("%s: no dot product for %s", k.name, t)
	}
	sh := &shapes[t]
	if n <= 0 || rows < 0 || m < 0 || n%sh.block != 0 {
		return fmt.Errorf("%s: bad shape n=%d rows=%d m=%d for %s (block %d)", k.name, n, rows, m, t, sh.block)
	}
	nb := uint64(n / sh.block)
	if hi, need := bits.Mul64(nb*uint64(sh.wbytes), uint64(rows)); hi != 0 || uint64(wlen) < need {
		return fmt.Errorf("%s: %d rows of %d %s need %d weight bytes, have %d", k.name, rows, n, t, need, wlen)
	}
	if hi, need := bits.Mul64(nb*uint64(sh.abytes), uint64(m)); hi != 0 || uint64(alen) < need {
		return fmt.Errorf("%s: %d activation rows of %d %s need %d bytes, have %d", k.name, m, n, sh.vt, need, alen)
	}
	return nil
}
