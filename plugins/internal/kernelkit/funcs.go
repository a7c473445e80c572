package kernelkit

import "github.com/k3-inference/k3/core/quant"

// Funcs are one level's assembly kernels, with the signatures tools/asmgen
// gives them. A nil field leaves its type on the reference.
type Funcs struct {
	// Q2K..Q6K are one weight row of nb blocks times a Q8_K row; the x4
	// kernels take four Q8_K rows astride bytes apart into out[0:4].
	Q2K, Q3K, Q4K, Q5K, Q6K           func(w, a *byte, nb int) float32
	Q2Kx4, Q3Kx4, Q4Kx4, Q5Kx4, Q6Kx4 func(w, a *byte, nb, astride int, out *float32)
	// Q2Kx2 and Q2Kx3 (optional) are Q2Kx4 on two and three rows (into
	// out[0:4], the lanes past the rows garbage): MatMul runs a tail of
	// two or three activation rows on them, each weight block unpacked
	// once for the rows.
	Q2Kx2, Q2Kx3 func(w, a *byte, nb, astride int, out *float32)
	// Q3KP and Q6KP (optional) are Q3K and Q6K on a prepared activation
	// row (prep.go); where set, Dot, MatVec and MatMul below four
	// activation rows use them.
	Q3KP, Q6KP func(w, a *byte, nb int) float32
	// Q3KPT and Q6KPT (optional) continue Q3KP and Q6KP: nb blocks of a
	// row added into its eight float lanes acc[0:8], which they leave
	// unsummed, so that MatVec can run rows too long to prepare a tile of
	// blocks at a time (prep.go); Q4KPT and Q5KPT likewise continue Q4KP
	// and Q5KP, whose rows also carry sumf, in acc[8]. pf is where the
	// weights to come are: a tile kernel prefetches its share of them.
	Q3KPT, Q6KPT, Q4KPT, Q5KPT func(w, a *byte, nb int, acc *[9]float32, pf *byte)
	// Q3KxPT and Q6KxPT (optional) are Q3KPT and Q6KPT on 2, 3 and 4
	// (index 0, 1, 2) prepared rows astride bytes apart, row k's lanes at
	// acc[9k:9k+8]: where set, MatMul runs several rows too long to
	// prepare together, a tile of blocks at a time, so that each weight
	// row is read once for them (instead of once per row, or by the Q8_K
	// four-row kernels).
	Q3KxPT, Q6KxPT [3]func(w, a *byte, nb, astride int, acc *float32, pf *byte)
	// Q4KP and Q5KP (optional) are Q4K and Q5K on a prepared row, used the
	// same way; their rows carry the bsums after d (prep.go).
	Q4KP, Q5KP func(w, a *byte, nb int) float32
	// PrepQ8K (optional) prepares nb Q8_K blocks for them with the quant
	// offset off; nil: prep.go's Go version, which gives the same bytes.
	PrepQ8K func(a *byte, nb int, dst *byte, off int)
	// Q4Kx4P and Q5Kx4P (optional) are Q4Kx4 and Q5Kx4 on four rows in
	// the compact prepared layout (prep.go, prep45*); where set, MatMul
	// with four activation rows or more prepares them once and uses these.
	Q4Kx4P, Q5Kx4P func(w, a *byte, nb, astride int, out *float32)
	// PrepQ45 (optional) prepares four Q8_K rows of nb blocks, astride
	// bytes apart, in that layout; nil: prep.go's Go version, which gives
	// the same bytes.
	PrepQ45 func(a *byte, astride, nb int, dst *byte)

	// Q8_0..MXFP4 and IQ4_NL are one weight row of nb 32-element blocks
	// times a Q8_0 row.
	Q8_0, Q4_0, Q5_0, MXFP4, IQ4NL func(w, a *byte, nb int) float32
	// Q8_0r8..MXFP4r8 are eight weight rows, wstride bytes apart, times one
	// Q8_0 row into out[0:8], each exactly as the one-row kernel: a row's
	// float sum is a dependent chain of one add per block, which bounds one
	// row; eight run side by side, and each activation block is read once.
	Q8_0r8, Q4_0r8, Q5_0r8, MXFP4r8, IQ4NLr8 func(w *byte, wstride int, a *byte, nb int, out *float32)
	// Q4_1 and Q5_1 are one weight row of nb blocks times a Q8_1 row, and
	// their r8 kernels eight such rows, as Q8_0r8 is for its type.
	Q4_1, Q5_1     func(w, a *byte, nb int) float32
	Q4_1r8, Q5_1r8 func(w *byte, wstride int, a *byte, nb int, out *float32)
	// IQ4XS is one IQ4_XS weight row of nb super-blocks times a Q8_K row;
	// IQ4XSr8 eight such rows, as Q8_0r8 does for its type.
	IQ4XS   func(w, a *byte, nb int) float32
	IQ4XSr8 func(w *byte, wstride int, a *byte, nb int, out *float32)
	// TQ1 and TQ2 are one TQ1_0 or TQ2_0 row of nb super-blocks times a
	// Q8_K row.
	TQ1, TQ2 func(w, a *byte, nb int) float32
	// TQ1x4 and TQ2x4 are TQ1 and TQ2 on four Q8_K rows astride bytes
	// apart into out[0:4], as Q2Kx4 is for Q2_K: a block's trits are
	// unpacked once for the four.
	TQ1x4, TQ2x4 func(w, a *byte, nb, astride int, out *float32)
	// IQ2XXS, IQ2XS, IQ2S, IQ3XXS, IQ3S, IQ1S and IQ1M are one row of nb
	// super-blocks of their type times a Q8_K row (their grids are
	// generated into the assembly from core/quant's).
	IQ2XXS, IQ2XS, IQ2S, IQ3XXS, IQ3S, IQ1S, IQ1M func(w, a *byte, nb int) float32
	// IQ2XXSx4..IQ1Mx4 are those times four Q8_K rows, as Q2Kx4 is.
	IQ2XXSx4, IQ2XSx4, IQ2Sx4, IQ3XXSx4, IQ3Sx4, IQ1Sx4, IQ1Mx4 func(w, a *byte, nb, astride int, out *float32)

	// F32, F16 and BF16 take FloatRows weight rows (1 if unset) wstride
	// bytes apart and a prepared activation row, n elements of each (a
	// multiple of floatChunk), and put what exactFloatCheck needs into out
	// (see exactfloat.go: floatKernel).
	F32, F16, BF16 func(w *byte, wstride int, a *byte, n int, out *float64)
	FloatRows      int
	// F32Seq, F16Seq and BF16Seq are the reference's sequential sum of n
	// products of plain rows, n a multiple of 8: where the bound fails.
	F32Seq, F16Seq, BF16Seq func(w, a *byte, n int) float64
	// FastF32, FastF16 and FastBF16 are float mode fast's kernels
	// (fastfloat.go: fastKernel): rows weight rows wstride bytes apart
	// times one activation row (F32: the float32s; F16: PrepFastF16's
	// float32s; BF16: the bf16s as they are), n a multiple of fastChunk,
	// row r's float64 sum into out[r]. They read FastRows rows side by
	// side (1 if unset; a divisor of 8), and rows is a multiple of that.
	FastF32, FastF16, FastBF16 func(w *byte, wstride int, a *byte, n, rows int, out *float64)
	FastRows                   int
	// PrepFastF16 writes the first n activations (n a multiple of
	// fastChunk) of an F16 row as the float32s FastF16 reads.
	PrepFastF16 func(src, dst *byte, n int)

	// QuantizeQ8K quantizes nb blocks of 256 floats to Q8_K.
	QuantizeQ8K func(x *float32, y *byte, nb int)
}

// Add appends the level name with the kernels f and makes it the active
// one: a plugin adds its levels worst first, each only once it knows the
// CPU runs it, and may then pick another with SetLevel. Add is for package
// initialization, before any kernel runs.
func (k *Kit) Add(name string, f Funcs) {
	l := &level{name: name, dot: map[quant.Type]dotFunc{}, dot4: map[quant.Type]dot4Func{}, dotFew: map[quant.Type][4]dot4Func{},
		rows8: map[quant.Type]rows8Func{}, quantizeQ8K: f.QuantizeQ8K}
	for t, fn := range map[quant.Type]func(w, a *byte, nb int) float32{
		quant.Q2_K: f.Q2K, quant.Q3_K: f.Q3K, quant.Q4_K: f.Q4K, quant.Q5_K: f.Q5K, quant.Q6_K: f.Q6K,
		quant.IQ4_XS: f.IQ4XS, quant.TQ1_0: f.TQ1, quant.TQ2_0: f.TQ2,
		quant.IQ2_XXS: f.IQ2XXS, quant.IQ2_XS: f.IQ2XS, quant.IQ2_S: f.IQ2S,
		quant.IQ3_XXS: f.IQ3XXS, quant.IQ3_S: f.IQ3S, quant.IQ1_S: f.IQ1S, quant.IQ1_M: f.IQ1M,
	} {
		if fn != nil {
			l.dot[t] = kquant(fn, t.TypeSize())
		}
	}
	for t, fn := range map[quant.Type]func(w, a *byte, nb, astride int, out *float32){
		quant.Q2_K: f.Q2Kx4, quant.Q3_K: f.Q3Kx4, quant.Q4_K: f.Q4Kx4, quant.Q5_K: f.Q5Kx4, quant.Q6_K: f.Q6Kx4,
		quant.TQ1_0: f.TQ1x4, quant.TQ2_0: f.TQ2x4,
		quant.IQ2_XXS: f.IQ2XXSx4, quant.IQ2_XS: f.IQ2XSx4, quant.IQ2_S: f.IQ2Sx4,
		quant.IQ3_XXS: f.IQ3XXSx4, quant.IQ3_S: f.IQ3Sx4, quant.IQ1_S: f.IQ1Sx4, quant.IQ1_M: f.IQ1Mx4,
	} {
		if fn != nil {
			l.dot4[t] = kquant4(fn, t.TypeSize())
		}
	}
	if f.Q2Kx2 != nil && f.Q2Kx3 != nil {
		sz := quant.Q2_K.TypeSize()
		l.dotFew[quant.Q2_K] = [4]dot4Func{2: kquantRows(f.Q2Kx2, sz, 2), 3: kquantRows(f.Q2Kx3, sz, 3)}
	}
	for t, fn := range map[quant.Type]func(w, a *byte, nb int) float32{
		quant.Q8_0: f.Q8_0, quant.Q4_0: f.Q4_0, quant.Q5_0: f.Q5_0, quant.MXFP4: f.MXFP4, quant.IQ4_NL: f.IQ4NL,
	} {
		if fn != nil {
			l.dot[t] = block32(fn, t.TypeSize(), q8_0Size)
		}
	}
	for t, fn := range map[quant.Type]func(w, a *byte, nb int) float32{quant.Q4_1: f.Q4_1, quant.Q5_1: f.Q5_1} {
		if fn != nil {
			l.dot[t] = block32(fn, t.TypeSize(), q8_1Size)
		}
	}
	for t, fn := range map[quant.Type]func(w *byte, wstride int, a *byte, nb int, out *float32){
		quant.Q4_1: f.Q4_1r8, quant.Q5_1: f.Q5_1r8,
	} {
		if fn != nil {
			l.rows8[t] = block32r8(fn, t.TypeSize(), q8_1Size)
		}
	}
	for t, fn := range map[quant.Type]func(w *byte, wstride int, a *byte, nb int, out *float32){
		quant.Q8_0: f.Q8_0r8, quant.Q4_0: f.Q4_0r8, quant.Q5_0: f.Q5_0r8, quant.MXFP4: f.MXFP4r8, quant.IQ4_NL: f.IQ4NLr8,
	} {
		if fn != nil {
			l.rows8[t] = block32r8(fn, t.TypeSize(), q8_0Size)
		}
	}
	if f.IQ4XSr8 != nil {
		l.rows8[quant.IQ4_XS] = kquantr8(f.IQ4XSr8, quant.IQ4_XS.TypeSize())
	}
	for t, fn := range map[quant.Type]func(w *byte, wstride int, a *byte, n int, out *float64){
		quant.F32: f.F32, quant.F16: f.F16, quant.BF16: f.BF16,
	} {
		seq := map[quant.Type]func(w, a *byte, n int) float64{quant.F32: f.F32Seq, quant.F16: f.F16Seq, quant.BF16: f.BF16Seq}[t]
		if fn != nil {
			if l.fprep == nil {
				l.fprep = map[quant.Type]*floatPrep{}
			}
			l.fprep[t] = newFloatPrep(t, fn, f.FloatRows, seq)
			l.dot[t] = l.fprep[t].dotFunc()
		}
	}
	if f.FastF32 != nil || f.FastF16 != nil || f.FastBF16 != nil {
		l.fast = map[quant.Type]*fastPrep{}
	}
	if f.FastF32 != nil {
		l.fast[quant.F32] = newFastPrep(quant.F32, f.FastF32, f.FastRows)
	}
	if f.FastF16 != nil {
		l.fast[quant.F16] = newFastPrep(quant.F16, f.FastF16, f.FastRows)
		l.fast[quant.F16].prepK = f.PrepFastF16
	}
	if f.FastBF16 != nil {
		l.fast[quant.BF16] = newFastPrep(quant.BF16, f.FastBF16, f.FastRows)
	}
	l.addPrepared(f)
	l.addPrepared4(f)
	k.levels = append(k.levels, l)
	k.active = l
}

// Adapters from the assembly signatures (pointers and a block count) to
// dotFunc. They are only called with lengths MatVec and Dot have checked;
// the slice expressions still make a short slice panic rather than read
// out of bounds.

const (
	q8KSize  = 292
	q8_0Size = 34
	q8_1Size = 36
)

func kquant(f func(w, a *byte, nb int) float32, wsize int) dotFunc {
	return func(n int, w, a []byte) float32 {
		nb := n / quant.QK_K
		if nb == 0 {
			return 0
		}
		w, a = w[:nb*wsize], a[:nb*q8KSize]
		return f(&w[0], &a[0], nb)
	}
}

func block32(f func(w, a *byte, nb int) float32, wsize, asize int) dotFunc {
	return func(n int, w, a []byte) float32 {
		nb := n / 32
		if nb == 0 {
			return 0
		}
		w, a = w[:nb*wsize], a[:nb*asize]
		return f(&w[0], &a[0], nb)
	}
}

func kquant4(f func(w, a *byte, nb, astride int, out *float32), wsize int) dot4Func {
	return kquantRows(f, wsize, 4)
}

// kquantRows wraps a kernel of m activation rows astride bytes apart.
func kquantRows(f func(w, a *byte, nb, astride int, out *float32), wsize, m int) dot4Func {
	return func(n int, w, a []byte, astride int, out *[4]float32) {
		nb := n / quant.QK_K
		if nb == 0 {
			*out = [4]float32{}
			return
		}
		w, a = w[:nb*wsize], a[:(m-1)*astride+nb*q8KSize]
		f(&w[0], &a[0], nb, astride, &out[0])
	}
}

func kquantr8(f func(w *byte, wstride int, a *byte, nb int, out *float32), wsize int) rows8Func {
	return func(n int, w []byte, wrow int, a []byte, out *[8]float32) {
		nb := n / quant.QK_K
		if nb == 0 {
			*out = [8]float32{}
			return
		}
		w, a = w[:7*wrow+nb*wsize], a[:nb*q8KSize]
		f(&w[0], wrow, &a[0], nb, &out[0])
	}
}

func block32r8(f func(w *byte, wstride int, a *byte, nb int, out *float32), wsize, asize int) rows8Func {
	return func(n int, w []byte, wrow int, a []byte, out *[8]float32) {
		nb := n / 32
		if nb == 0 {
			*out = [8]float32{}
			return
		}
		w, a = w[:7*wrow+nb*wsize], a[:nb*asize]
		f(&w[0], wrow, &a[0], nb, &out[0])
	}
}
