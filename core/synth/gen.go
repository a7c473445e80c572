package synth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/k3-inference/k3/core/quant"
)

// rng is splitmix64: tiny state, so every row gets its own generator
// seeded from (seed, tensor, row) and rows can be made in any order, by
// any worker, with the same result.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// float returns a uniform value in [0, 1) with 24 random bits.
func (r *rng) float() float32 { return float32(r.next()>>40) * (1.0 / (1 << 24)) }

func hashName(name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return h
}

// rowRNG seeds the generator of one row; stream separates direct rows from
// pool rows of the same tensor.
func rowRNG(seed, tensor uint64, stream, row int64) rng {
	r := rng{s: seed ^ tensor*0x9e3779b97f4a7c15}
	r.s ^= uint64(stream)<<56 ^ uint64(row)*0xd1b54a32d192ed03
	r.next()
	return r
}

// fill draws len(dst) values of d.
func (d initDist) fill(r *rng, dst []float32) {
	span := d.Hi - d.Lo
	for i := range dst {
		dst[i] = d.Lo + span*r.float()
	}
	if d.NegExp {
		for i, v := range dst {
			dst[i] = -float32(math.Exp(float64(v)))
		}
	}
}

// encodeRow stores src as type t into dst (exactly one row's bytes),
// with importance weights imatrix (one per column) when not nil.
func encodeRow(t quant.Type, src []float32, dst []byte, imatrix []float32) error {
	switch t {
	case quant.F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
		return nil
	case quant.F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], quant.FP32ToFP16(v))
		}
		return nil
	}
	if imatrix != nil {
		if err := quant.QuantizeImatrix(t, src, dst, len(src), imatrix); err != nil {
			return fmt.Errorf("synth: encode %d values as %s: %w", len(src), t, err)
		}
		return nil
	}
	if err := quant.Quantize(t, src, dst); err != nil {
		return fmt.Errorf("synth: encode %d values as %s: %w", len(src), t, err)
	}
	return nil
}

// Tensors with more elements than poolMinElements, stored in a block type,
// are assembled from a pool of about poolBlocks quantized blocks (whole
// rows of the tensor): each block of each row is a randomly chosen pool
// block. Blocks of every ggml type are self contained (own scales), so the
// result is as valid and finite as the pool, and a multi-GB expert tensor
// costs memcpy time instead of reference quantization time. The tiny
// preset stays under the threshold: every one of its rows is quantized.
const (
	poolMinElements = 1 << 20
	poolBlocks      = 256
)

// rowMaker produces the stored bytes of any row of one tensor.
type rowMaker struct {
	def      *tensorDef
	seed     uint64
	tensorID uint64
	rowBytes int
	// imatrix is the importance of each column for a type that needs one
	// (quant.RequiresImatrix), else nil
	imatrix []float32
	// pool mode
	pool      []byte
	blockSize int // bytes per block
	nBlocks   int // blocks per row
}

func newRowMaker(def *tensorDef, seed uint64) (*rowMaker, error) {
	rb, err := quant.RowSize(def.Type, def.rowLen())
	if err != nil {
		return nil, fmt.Errorf("synth: tensor %q: %w", def.Name, err)
	}
	m := &rowMaker{def: def, seed: seed, tensorID: hashName(def.Name), rowBytes: int(rb)}
	pooled := def.Type.BlockSize() > 1 && def.elements() > poolMinElements
	if pooled {
		m.blockSize = def.Type.TypeSize()
		m.nBlocks = m.rowBytes / m.blockSize
	}
	if quant.RequiresImatrix(def.Type) {
		if pooled {
			m.imatrix = m.columnMeanSquare(1, int64(m.poolRows()))
		} else {
			m.imatrix = m.columnMeanSquare(0, def.rows())
		}
	}
	if pooled {
		if err := m.buildPool(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// columnMeanSquare is the synthetic importance matrix of a tensor: per
// column, the mean square of the F32 source values of rows [0, n) of
// stream (0: the tensor's rows, 1: its pool rows). An imatrix collected
// from activations weighs each column by its mean squared input; here the
// weights' own statistics stand in for it, deterministically.
func (m *rowMaker) columnMeanSquare(stream, n int64) []float32 {
	cols := m.def.rowLen()
	sum := make([]float64, cols)
	src := make([]float32, cols)
	for i := range n {
		r := rowRNG(m.seed, m.tensorID, stream, i)
		m.def.Init.fill(&r, src)
		for c, v := range src {
			sum[c] += float64(v) * float64(v)
		}
	}
	im := make([]float32, cols)
	for c := range im {
		im[c] = float32(sum[c] / float64(max(n, 1)))
	}
	return im
}

func (m *rowMaker) poolRows() int { return (poolBlocks + m.nBlocks - 1) / m.nBlocks }

// buildPool quantizes the pool rows on every CPU.
func (m *rowMaker) buildPool() error {
	poolRows := m.poolRows()
	m.pool = make([]byte, poolRows*m.rowBytes)
	n := min(runtime.GOMAXPROCS(0), poolRows)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := make([]float32, m.def.rowLen())
			for i := w; i < poolRows; i += n {
				r := rowRNG(m.seed, m.tensorID, 1, int64(i))
				m.def.Init.fill(&r, src)
				if err := encodeRow(m.def.Type, src, m.pool[i*m.rowBytes:(i+1)*m.rowBytes], m.imatrix); err != nil {
					errs[w] = fmt.Errorf("synth: tensor %q: %w", m.def.Name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// rows writes rows [first, first+n) into dst, using src as scratch of at
// least one row of float32.
func (m *rowMaker) rows(first, n int64, dst []byte, src []float32) error {
	for i := range n {
		out := dst[int(i)*m.rowBytes : int(i+1)*m.rowBytes]
		r := rowRNG(m.seed, m.tensorID, 0, first+i)
		if m.def.Rows != nil {
			// a shaped row draws from its own stream, so the pool's
			// choices for the other rows stay those of a random file
			sr := rowRNG(m.seed, m.tensorID, 2, first+i)
			s := src[:m.def.rowLen()]
			m.def.Init.fill(&sr, s)
			if m.def.Rows(first+i, s) {
				if err := encodeRow(m.def.Type, s, out, m.imatrix); err != nil {
					return fmt.Errorf("synth: tensor %q row %d: %w", m.def.Name, first+i, err)
				}
				continue
			}
		}
		if m.pool != nil {
			total := uint64(len(m.pool) / m.blockSize)
			for b := range m.nBlocks {
				k := int(r.next() % total)
				copy(out[b*m.blockSize:(b+1)*m.blockSize], m.pool[k*m.blockSize:(k+1)*m.blockSize])
			}
			continue
		}
		s := src[:m.def.rowLen()]
		m.def.Init.fill(&r, s)
		if err := encodeRow(m.def.Type, s, out, m.imatrix); err != nil {
			return fmt.Errorf("synth: tensor %q row %d: %w", m.def.Name, first+i, err)
		}
	}
	return nil
}
