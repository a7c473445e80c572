package kernelkit

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/k3-inference/k3/core/quant"
)

// Float mode "fast" (SetFloatMode; a profile's kernels.float): F16 and
// BF16 weights take the fast kernels (tools/asmgen/fast_float.go) instead
// of the exact ones. The exact kernels return the reference's float32 bit
// for bit, which costs a widening of every weight to float64 and leaves
// them compute-bound at about half of ggml's speed; the fast ones add the
// same float32 products in float32 lanes, as ggml's SIMD code does, but
// only four deep: every 64 elements each of the 16 lanes is flushed into
// a float64 lane. The order is fixed (fast_float.go spells it out), so the
// result is the same on every level, the pure-Go one included
// (FastFloatRef), bit for bit; it differs from the reference by at most
// three float32 roundings a lane per 64 elements: |fast - exact| <=
// 2^-21·Σ|products| + the final rounding (tested on 100k random rows).
// F32 keeps its exact kernels: they already run at memory speed.
const fastChunk = 64

// FloatModes are the values SetFloatMode takes.
var FloatModes = []string{"exact", "fast"}

// SetFloatMode selects the F16/BF16 arithmetic of MatVec, MatMul and Dot:
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

// fastTypes are the types float mode fast changes.
func fastType(t quant.Type) bool { return t == quant.F16 || t == quant.BF16 }

// fastIndex is the element of a 64-element chunk that lane j takes at
// step k (0..3).
func fastIndex(t quant.Type, k, j int) int {
	if t == quant.F16 {
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
		for k := 1; k < 4; k++ {
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
// activation row a, both n elements of t (F16 or BF16). It is the fast
// mode's test oracle and the pure-Go level's kernel.
func FastFloatRef(t quant.Type, n int, w, a []byte) float32 {
	return float32(fastSum(t, n, func(i int) float32 { return elem(t, w[2*i:]) },
		func(i int) float32 { return elem(t, a[2*i:]) }))
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

// fastPrep prepares activation rows for a fast kernel and runs it: a
// prepared row is the n activations as float32s, in the whole chunks in
// the kernel's order (BF16: each 32 elements' 16 even ones, then the 16
// odd ones), 64-byte aligned rows back to back.
type fastPrep struct {
	t     quant.Type
	kern  floatKernel                 // nil: fastSum in Go
	prepK func(src, dst *byte, n int) // the whole chunks' prep (nil: Go)
	nrow  int
}

func newFastPrep(t quant.Type, kern floatKernel, nrow int) *fastPrep {
	return &fastPrep{t: t, kern: kern, nrow: min(max(nrow, 1), maxFloatRows)}
}

func (p *fastPrep) rowSize(n int) int { return (4*n + 63) &^ 63 }

// slot is where element i's activation sits in a prepared row of n.
func (p *fastPrep) slot(i, n int) int {
	if p.t == quant.F16 || i >= n&^(fastChunk-1) {
		return i
	}
	return i&^31 + i%2*16 + i%32/2
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
		src, d := a[j*arow:j*arow+2*n], f32(dst[j*prow:(j+1)*prow])
		i0 := 0
		if c := n &^ (fastChunk - 1); p.prepK != nil && c > 0 {
			p.prepK(&src[0], &dst[j*prow], c)
			i0 = c
		}
		if p.t == quant.F16 {
			for i := i0; i < n; i++ {
				d[i] = quant.FP16ToFP32(binary.LittleEndian.Uint16(src[2*i:]))
			}
			continue
		}
		for i := i0; i < n; i++ {
			d[p.slot(i, n)] = quant.BF16ToFP32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	}
	return dst
}

// dot is one weight row times the prepared row pa.
func (p *fastPrep) dot(n int, w, pa []byte) float32 {
	var out [maxFloatRows]float64
	m := n &^ (fastChunk - 1)
	if p.kern == nil || m == 0 {
		a := f32(pa)
		return float32(fastSum(p.t, n, func(i int) float32 { return elem(p.t, w[2*i:]) },
			func(i int) float32 { return a[p.slot(i, n)] }))
	}
	p.kern(&w[0], 0, &pa[0], m, &out[0])
	return p.tail(n, m, w, pa, out[0])
}

// tail adds the elements after the kernel's m to its sum s and rounds.
func (p *fastPrep) tail(n, m int, w, pa []byte, s float64) float32 {
	if m < n {
		a := f32(pa)
		for i := m; i < n; i++ {
			s += float64(elem(p.t, w[2*i:]) * a[i])
		}
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
	var o [maxFloatRows]float64
	for r0 := 0; r0 < 8; r0 += p.nrow {
		p.kern(&w[r0*wrow], wrow, &pa[0], m, &o[0])
		for r := r0; r < r0+p.nrow; r++ {
			out[r] = p.tail(n, m, w[r*wrow:], pa, o[r-r0])
		}
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
