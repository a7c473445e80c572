package kernelkit

import (
	"fmt"
	"math/bits"
	"sync"

	"github.com/k3-inference/k3/core/parallel"
	"github.com/k3-inference/k3/core/quant"
)

// rowAlign is the granularity of a worker's row range: 16 float32 outputs
// fill a 64-byte cache line, so no two workers write the same line of out
// (for MatMul, of each activation row's part of out when rows is a multiple
// of 16).
const rowAlign = 16

// tileBytes bounds the weight rows MatMul keeps hot while it runs every
// activation row over them: the tile stays in L2, so the weights are read
// from memory once per batch, not once per activation row.
const tileBytes = 256 << 10

// MatVec computes out[i] = w_i · act for i < rows: w holds rows weight rows
// of n elements of type t back to back, act one activation row of n
// elements in t.VecDotType() (see QuantizeActivation). threads goroutines
// share the rows in contiguous ranges (threads <= 1: the calling goroutine
// does all the work).
func (k *Kit) MatVec(t quant.Type, w []byte, rows, n int, act []byte, out []float32, threads int) error {
	return k.MatMul(t, w, rows, n, act, 1, out, threads)
}

// MatMul computes out[j*rows+i] = w_i · act_j for i < rows and j < m: act
// holds m activation rows back to back. Each worker takes a tile of weight
// rows and runs all m activation rows over it before the next tile, four
// activation rows per pass where the level has such a kernel (the K-quants),
// so each weight block is unpacked once for four. Results are bit-identical
// to MatVec's.
func (k *Kit) MatMul(t quant.Type, w []byte, rows, n int, act []byte, m int, out []float32, threads int) error {
	run, release, err := k.matMulPlan(t, w, rows, n, act, m, out, k.fastFloat)
	if err != nil {
		return err
	}
	defer release()
	parallelRows(rows, threads, run)
	return nil
}

// matMulPlan checks one MatMul and returns the function that computes its
// weight rows [r0, r1), and what to call once every row has run. fast
// selects float mode fast for F32, F16 and BF16.
func (k *Kit) matMulPlan(t quant.Type, w []byte, rows, n int, act []byte, m int, out []float32, fast bool) (run func(r0, r1 int), release func(), err error) {
	if err := k.checkRows(t, n, len(w), rows, len(act), m); err != nil {
		return nil, nil, err
	}
	if hi, need := bits.Mul64(uint64(rows), uint64(m)); hi != 0 || uint64(len(out)) < need {
		return nil, nil, fmt.Errorf("%s: %d×%d outputs need len(out) >= %d, have %d", k.name, m, rows, need, len(out))
	}
	wrow, _ := quant.RowSize(t, int64(n))
	arow, _ := quant.RowSize(t.VecDotType(), int64(n))
	f, f4, fr := k.active.dotOf(t), k.active.dot4[t], k.active.rows8[t]
	release = func() {}
	if p := k.active.prep[t]; p != nil && (f4 == nil || m < 4 || p.tileN[4] != nil && p.tiled(n)) && p.use(n) {
		// Prepare every activation row once; all weight rows reuse it.
		bp := prepPool.Get().(*[]byte)
		release = func() { prepPool.Put(bp) }
		act = p.rows(act, n, int(arow), m, bp)
		arow = int64(n / quant.QK_K * prepBlock)
		f = p.dot
		if p.tiled(n) || m >= 2 && p.tileN[min(m, 4)] != nil {
			// Rows too long to prepare whole, or several short ones
			// (routed experts of a batched decode step): each weight row
			// read once for all of them, four at a time, then the rest
			// together, as far as there are kernels for several rows.
			return func(r0, r1 int) {
				j := 0
				for ; m-j >= 2; j += 4 {
					g := min(4, m-j)
					if p.tileN[g] == nil {
						break
					}
					p.tiledRangeN(g, n, w, int(wrow), r0, r1, act[j*int(arow):(j+g)*int(arow)], int(arow), out[j*rows:(j+g)*rows], rows)
				}
				j = min(j, m)
				for ; j < m; j++ {
					p.tiledRange(n, w, int(wrow), r0, r1, act[j*int(arow):(j+1)*int(arow)], out[j*rows:(j+1)*rows])
				}
			}, release, nil
		}
	}
	if fast && fastType(t) {
		p := k.active.fastOf(t)
		bp := floatPool.Get().(*[]byte)
		release = func() { floatPool.Put(bp) }
		act = p.rows(act, n, int(arow), m, bp)
		arow = int64(p.rowSize(n))
		f, f4, fr = p.dot, nil, p.rows8
	} else if p := k.active.fprep[t]; p != nil {
		bp := floatPool.Get().(*[]byte)
		prev := release
		release = func() { floatPool.Put(bp); prev() }
		act = p.rows(act, n, int(arow), m, bp)
		arow = int64(p.rowSize(n))
		f, fr = p.dot, p.rows8
	}
	act4, arow4, jt := act, int(arow), 0
	if f4 != nil && m >= 4 {
		m4 := m &^ 3
		if p4 := k.active.prep4[t]; p4 != nil {
			// The four-row passes read their rows prepared once (compactly:
			// four fit where four Q8_K rows did).
			bp, prev := prepPool.Get().(*[]byte), release
			release = func() { prepPool.Put(bp); prev() }
			act4, arow4 = p4.rows(act, n, int(arow), m4, bp)
			f4 = p4.dot4
		}
		if p := k.active.prep[t]; p != nil && m > m4 {
			// A tail of fewer than four rows: prepared once for the
			// one-row kernel where that pays, else the Q8_K kernel, not
			// Dot's, which would prepare the row for every weight row.
			act, jt, f = act[int64(m4)*arow:], m4, p.raw
			if n/quant.QK_K <= prepMaxBlocks {
				bt, prev := prepPool.Get().(*[]byte), release
				release = func() { prepPool.Put(bt); prev() }
				act = p.rows(act, n, int(arow), m-m4, bt)
				arow = int64(n / quant.QK_K * prepBlock)
				f = p.dot
			}
		}
	}
	// Tails of two or three rows on plain Q8_K rows (a type without
	// prepared rows) run together.
	var few [4]dot4Func
	if k.active.prep[t] == nil && k.active.fprep[t] == nil && !(fast && fastType(t)) {
		few = k.active.dotFew[t]
	}
	return func(r0, r1 int) {
		matMulRange(f, f4, fr, few, n, w, int(wrow), r0, r1, act, int(arow), jt, act4, arow4, m, out, rows)
	}, release, nil
}

// parallelPlans runs several planned products in one parallel loop: their
// rows, each product's padded to whole rowAlign chunks, are laid end to end
// and handed out in chunks as parallelRows does, so a batch of small
// products (a layer's experts) keeps every thread busy with one wait at
// the end instead of one per product.
func parallelPlans(rows []int, runs []func(r0, r1 int), threads int) {
	starts := make([]int, len(rows)+1)
	for i, r := range rows {
		starts[i+1] = starts[i] + (r+rowAlign-1)/rowAlign*rowAlign
	}
	total := starts[len(rows)]
	do := func(lo, hi int) {
		for i := range runs {
			a, b := max(lo, starts[i]), min(hi, starts[i]+rows[i])
			if a < b {
				runs[i](a-starts[i], b-starts[i])
			}
		}
	}
	parallelRows(total, threads, do)
}

// MatVecF32 is MatVec on an f32 activation row, quantized first.
func (k *Kit) MatVecF32(t quant.Type, w []byte, rows, n int, x []float32, out []float32, threads int) error {
	if len(x) != n {
		return fmt.Errorf("%s: activation has %d elements, rows have %d", k.name, len(x), n)
	}
	arow, err := quant.RowSize(t.VecDotType(), int64(n))
	if err != nil {
		return fmt.Errorf("%s: activation: %w", k.name, err)
	}
	bp := actPool.Get().(*[]byte)
	defer actPool.Put(bp)
	if int64(cap(*bp)) < arow {
		*bp = make([]byte, arow)
	}
	act := (*bp)[:arow]
	if err := k.QuantizeActivation(t, x, act); err != nil {
		return err
	}
	return k.MatVec(t, w, rows, n, act, out, threads)
}

var actPool = sync.Pool{New: func() any { return new([]byte) }}

// matMulRange runs weight rows [r0, r1) over all m activation rows; f4
// (nil: none) takes four activation rows at a time, from act4 (arow4 bytes
// apart: act itself, or the rows prepared for f4), fr (nil: none) eight
// weight rows of one activation row. The rows f4 leaves to f are in act
// from row jt on, arow bytes apart; few[2] and few[3] (nil: none) take
// them together when two or three are left.
func matMulRange(f dotFunc, f4 dot4Func, fr rows8Func, few [4]dot4Func, n int, w []byte, wrow, r0, r1 int, act []byte, arow, jt int, act4 []byte, arow4, m int, out []float32, rows int) {
	// one runs weight rows [i0, i1) over activation row a into o[i0:i1].
	one := func(a []byte, o []float32, i0, i1 int) {
		i := i0
		for ; fr != nil && i+8 <= i1; i += 8 {
			fr(n, w[i*wrow:(i+8)*wrow], wrow, a, (*[8]float32)(o[i:i+8]))
		}
		for ; i < i1; i++ {
			o[i] = f(n, w[i*wrow:(i+1)*wrow], a)
		}
	}
	if m == 1 {
		one(act, out, r0, r1)
		return
	}
	var r4 [4]float32
	tile := max(1, tileBytes/wrow)
	if fr != nil {
		tile = max(8, tile&^7) // whole groups of eight rows
	}
	for i0 := r0; i0 < r1; i0 += tile {
		i1 := min(i0+tile, r1)
		j := 0
		for ; f4 != nil && j+4 <= m; j += 4 {
			a := act4[j*arow4 : (j+4)*arow4]
			for i := i0; i < i1; i++ {
				f4(n, w[i*wrow:(i+1)*wrow], a, arow4, &r4)
				for k, v := range r4 {
					out[(j+k)*rows+i] = v
				}
			}
		}
		if left := m - j; left >= 2 && left <= 3 && few[left] != nil {
			a := act[(j-jt)*arow : (m-jt)*arow]
			for i := i0; i < i1; i++ {
				few[left](n, w[i*wrow:(i+1)*wrow], a, arow, &r4)
				for k := range left {
					out[(j+k)*rows+i] = r4[k]
				}
			}
			j = m
		}
		for ; j < m; j++ {
			one(act[(j-jt)*arow:(j-jt+1)*arow], out[j*rows:(j+1)*rows], i0, i1)
		}
	}
}

// parallelRows runs fn on ranges covering [0, rows), on the calling
// goroutine and up to threads-1 of core/parallel's workers. Ranges are whole
// rowAlign chunks (but the last), a few per thread, taken from a shared
// counter: a thread that runs late, descheduled on a busy host, takes fewer
// instead of holding up the product.
func parallelRows(rows, threads int, fn func(r0, r1 int)) {
	aligned := (rows + rowAlign - 1) / rowAlign
	if threads > aligned {
		threads = aligned
	}
	if threads <= 1 {
		fn(0, rows)
		return
	}
	per := max(1, aligned/(threads*chunksPerThread))
	parallel.For(rows, per*rowAlign, threads, fn)
}

// chunksPerThread is about how many ranges each thread takes: more balance
// threads better (the last range is all one thread may wait for), fewer
// cost fewer trips to the shared counter. 16 against 4, 2 alternations of
// 4096x4096 MatVecs at 2 threads on Zen 4: Q2_K 28.2 -> 30.2 GB/s, Q6_K 57
// -> 61, Q8_0 72 -> 83, F16 fast 61 -> 63, Q4_K 48 -> 47; 32768x4096 the
// same within its noise.
const chunksPerThread = 16
