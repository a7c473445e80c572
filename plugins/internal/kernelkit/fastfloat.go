package kernelkit

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/k3-inference/k3/core/quant"
)

// Float mode "fast" (SetFloatMode; a profile's kernels.float): F32, F16
// and BF16 weights take the fast kernels (tools/asmgen/fast_float.go)
// instead of the exact ones. The exact kernels return the reference's
// float32 bit for bit, which costs a widening of every weight (F32: every
// product) to float64 and leaves F16/BF16 compute-bound at about half of
// ggml's speed and F32 about 10-20% below it; the fast ones add the
// float32 products in float32 lanes, as ggml's SIMD code does, but only
// four deep: every 64 elements each of the 16 lanes is flushed into a
// float64 lane. The order is fixed (fast_float.go spells it out), so the
// result is the same on every level, the pure-Go one included
// (FastFloatRef), bit for bit; it differs from the reference by at most
// three float32 roundings a lane per 64 elements (F32: and the product
// roundings the fused adds skip, at most 5·2^-24·Σ|products| to first
// order): |fast - exact| <= 2^-21·Σ|products| + the final rounding
// (tested on 100k random rows of each type).
const fastChunk = 64

// FloatModes are the values SetFloatMode takes.
var FloatModes = []string{"exact", "fast"}

// SetFloatMode selects the F32/F16/BF16 arithmetic of MatVec, MatMul and Dot:
// "exact" (the default: the reference's result, bit for bit) or "fast".
// Like SetLevel it is not safe to call with kernels running.
func (k *Kit) SetFloatMode(mode string) error {
	switch mode {
	case "", "exact":
		k.fastFloat = false
	case "fast":
		k.fastFloat = true
	default:
		return fmt.Errorf("%s: float mode %q is not exact or fast", k.name, mode)
	}
	return nil
}

// FloatMode names the float mode in use.
func (k *Kit) FloatMode() string {
	if k.fastFloat {
		return "fast"
	}
	return "exact"
}

// fastType reports whether float mode fast changes t.
func fastType(t quant.Type) bool { return t == quant.F32 || t == quant.F16 || t == quant.BF16 }

// fastIndex is the element of a chunk that lane j takes at step k
// (0..fastChunk/16-1).
func fastIndex(t quant.Type, k, j int) int {
	if t != quant.BF16 {
		return 16*k + j
	}
	return 32*(k/2) + 2*j + k%2
}

// fastSum is the fast order's float64 sum of the products of n weights
// wv(i) and activations av(i), before the final rounding to float32.
func fastSum(t quant.Type, n int, wv, av func(i int) float32) float64 {
	var d [16]float64
	m := n &^ (fastChunk - 1)
	for c := 0; c < m; c += fastChunk {
		var l [16]float32
		for j := range l {
			i := c + fastIndex(t, 0, j)
			l[j] = wv(i) * av(i)
		}
		for k := 1; k < fastChunk/16; k++ {
			for j := range l {
				i := c + fastIndex(t, k, j)
				l[j] = fma32(wv(i), av(i), l[j])
			}
		}
		for j, x := range l {
			d[j] += float64(x)
		}
	}
	for h := 8; h >= 1; h /= 2 {
		for j := range h {
			d[j] += d[j+h]
		}
	}
	s := d[0]
	for i := m; i < n; i++ {
		s += float64(wv(i) * av(i))
	}
	return s
}

// FastFloatRef is the fast order on plain rows: weight row w and
// activation row a, both n elements of t (F32, F16 or BF16). It is the
// fast mode's test oracle and the pure-Go level's kernel.
func FastFloatRef(t quant.Type, n int, w, a []byte) float32 {
	es := t.TypeSize()
	return float32(fastSum(t, n, func(i int) float32 { return elem(t, w[es*i:]) },
		func(i int) float32 { return elem(t, a[es*i:]) }))
}

// fma32 is x·y+z rounded once to float32. The product is exact in
// float64; the sum is rounded to odd there (53 bits, at least 24+2), which
// rounded to nearest float32 gives the correctly rounded sum (Boldo and
// Melquiond, "When double rounding is odd").
func fma32(x, y, z float32) float32 {
	p, c := float64(x)*float64(y), float64(z)
	s := p + c
	if math.IsInf(s, 0) || s != s {
		return float32(s)
	}
	b := s - p
	e := (p - (s - b)) + (c - b) // s's rounding error, exactly (TwoSum)
	if e != 0 && math.Float64bits(s)&1 == 0 {
		bits := math.Float64bits(s)
		if (e > 0) == (s > 0) {
			bits++
		} else {
			bits--
		}
		s = math.Float64frombits(bits)
	}
	return float32(s)
}

// fastKernel is a fast kernel (Funcs.FastF32, FastF16, FastBF16): rows weight rows
// (a multiple of the rows it reads side by side), wstride bytes apart,
// times one prepared activation row, n elements (a multiple of
// fastChunk), row r's float64 sum into out[r].
type fastKernel func(w *byte, wstride int, a *byte, n, rows int, out *float64)

// fastPrep prepares activation rows for a fast kernel and runs it. A
// prepared row is what the kernel reads: F32 activations as they are, F16
// ones as float32s, BF16 ones as they are (the kernels split them like the
// weights); rows 64-byte aligned, back to back.
type fastPrep struct {
	t     quant.Type
	kern  fastKernel                  // nil: fastSum in Go
	prepK func(src, dst *byte, n int) // F16's whole chunks (nil: Go)
	nrow  int                         // rows kern reads side by side
}

func newFastPrep(t quant.Type, kern fastKernel, nrow int) *fastPrep {
	nrow = min(max(nrow, 1), maxFloatRows)
	if 8%nrow != 0 {
		panic(fmt.Sprintf("kernelkit: fast %v kernel reads %d rows side by side, not a divisor of 8", t, nrow))
	}
	return &fastPrep{t: t, kern: kern, nrow: nrow}
}

// esize is the bytes of a prepared activation.
func (p *fastPrep) esize() int {
	if p.t == quant.BF16 {
		return 2
	}
	return 4
}

func (p *fastPrep) rowSize(n int) int { return (p.esize()*n + 63) &^ 63 }

// act is activation i of the prepared row pa.
func (p *fastPrep) act(pa []byte, i int) float32 {
	if p.t == quant.BF16 {
		return elem(quant.BF16, pa[2*i:])
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(pa[4*i:]))
}

// rows prepares m activation rows of n elements, arow bytes apart, into
// *bp (grown as needed) and returns them back to back, rowSize(n) apart.
func (p *fastPrep) rows(a []byte, n, arow, m int, bp *[]byte) []byte {
	prow := p.rowSize(n)
	size := m * prow
	if cap(*bp) < size+63 {
		*bp = make([]byte, size+63)
	}
	b := (*bp)[:cap(*bp)]
	al := int(-uintptr(unsafe.Pointer(&b[0])) & 63)
	dst := b[al : al+size]
	for j := range m {
		src := a[j*arow : j*arow+p.t.TypeSize()*n]
		if p.t != quant.F16 {
			copy(dst[j*prow:], src)
			continue
		}
		d := f32(dst[j*prow : (j+1)*prow])
		i0 := 0
		if c := n &^ (fastChunk - 1); p.prepK != nil && c > 0 {
			p.prepK(&src[0], &dst[j*prow], c)
			i0 = c
		}
		for i := i0; i < n; i++ {
			d[i] = quant.FP16ToFP32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	}
	return dst
}

// dot is one weight row times the prepared row pa.
func (p *fastPrep) dot(n int, w, pa []byte) float32 {
	var out [maxFloatRows]float64
	m := n &^ (fastChunk - 1)
	if p.kern == nil || m == 0 {
		es := p.t.TypeSize()
		return float32(fastSum(p.t, n, func(i int) float32 { return elem(p.t, w[es*i:]) },
			func(i int) float32 { return p.act(pa, i) }))
	}
	// A kernel reading rows side by side reads this one nrow times (from
	// the cache after the first).
	p.kern(&w[0], 0, &pa[0], m, p.nrow, &out[0])
	return p.tail(n, m, w, pa, out[0])
}

// tail adds the elements after the kernel's m to its sum s and rounds.
func (p *fastPrep) tail(n, m int, w, pa []byte, s float64) float32 {
	es := p.t.TypeSize()
	for i := m; i < n; i++ {
		s += float64(elem(p.t, w[es*i:]) * p.act(pa, i))
	}
	return float32(s)
}

// rows8 is eight weight rows, wrow bytes apart, times pa.
func (p *fastPrep) rows8(n int, w []byte, wrow int, pa []byte, out *[8]float32) {
	m := n &^ (fastChunk - 1)
	if p.kern == nil || m == 0 {
		for r := range out {
			out[r] = p.dot(n, w[r*wrow:], pa)
		}
		return
	}
	_ = w[7*wrow+p.t.TypeSize()*m-1] // the kernel reads this far
	var o [8]float64
	p.kern(&w[0], wrow, &pa[0], m, 8, &o[0])
	for r := range out {
		out[r] = p.tail(n, m, w[r*wrow:], pa, o[r])
	}
}

// dotFunc is Dot's kernel: it prepares its activation row first.
func (p *fastPrep) dotFunc() dotFunc {
	return func(n int, w, a []byte) float32 {
		bp := floatPool.Get().(*[]byte)
		defer floatPool.Put(bp)
		return p.dot(n, w, p.rows(a, n, 0, 1, bp))
	}
}
