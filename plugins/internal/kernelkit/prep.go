package kernelkit

import (
	"encoding/binary"
	"sync"
	"unsafe"

	"github.com/k3-inference/k3/core/quant"
)

// A prepared activation row is a Q8_K row rearranged once for the exact
// Q3_K/Q6_K kernels' "P" variants (tools/asmgen/q63prep.go), which would
// otherwise redo it for every weight row: per 256-element block, the 256
// quants permuted within each run of 32 into the kernels' lane order
// [0 8 16 24, 1 9 17 25, ..., 7 15 23 31]; then 128 int16 words, word i
// being the type's quant offset times the sum of permuted quants 2i and
// 2i+1 (what VPMADDUBSW of the offset with them gives, subtracted per
// lane); then d. A MatVec reuses the row for every weight row, so the
// kernels spend three operations per vector and row instead of five.
// The Q4_K/Q5_K "P" kernels (tools/asmgen/q45prep.go) use the same
// quants, prepared with offset 0, and the bsums copied to prepBsums (and
// their pair sums at prepPairs, for the vnni256 q4v kernels).
const (
	prepOff   = 256
	prepD     = 512
	prepBsums = 516 // Q4_K/Q5_K only: the 16 int16 bsums
	prepPairs = 548 // Q4_K/Q5_K only: bsums[2k]+bsums[2k+1], 8 int16 (q4v kernels)
	prepBlock = 576 // a multiple of 64: every vector load stays aligned
)

// prepared is one type's kernels on prepared rows.
type prepared struct {
	off  int                                       // the weight quants' offset: 32 (Q6_K) or 4 (Q3_K)
	bsum bool                                      // Q4_K, Q5_K: the Q8_K bsums at prepBsums
	prep func(a *byte, nb int, dst *byte, off int) // nil: prepRow
	dot  dotFunc
	raw  dotFunc // the kernel on plain Q8_K rows, for rows too long to prepare
	// tile (nil: none) continues a row's eight float lanes (and, Q4_K and
	// Q5_K, its sumf: acc[8]) over nb blocks; with it MatVec prepares rows
	// of any length and runs them a tile of blocks at a time (tiledRange).
	tile    func(w, a *byte, nb int, acc *[9]float32, pf *byte)
	tileMin int // blocks a row must exceed to run tile by tile
	wsize   int
	// tileN[m] (nil: none) is tile on m = 2, 3 or 4 rows (tiledRangeN).
	tileN [5]func(w, a *byte, nb, astride int, acc *float32, pf *byte)
}

// prepMaxBlocks bounds the rows worth preparing: a prepared block is twice
// a Q8_K block, and once a prepared row no longer stays in L1 next to the
// weights streaming through it, the kernels that permute in place are
// faster. Measured on Zen 4, 1 thread, 16384 rows, vnni256, GB/s prepared
// / plain: 20 blocks (5120 columns) Q3_K 13.1 / 11.5, Q6_K 24.1 / 24.1;
// 28 blocks (7168) Q3_K 9.0 / 11.7, Q6_K 17.3 / 23.0; 48 blocks Q3_K
// 6.8 / 8.8, Q6_K 8.3 / 15.9. Types with tile kernels (Q3_K, Q6_K) run
// longer rows a tile of at most tileBlocks at a time instead (tiledRange):
// 4096 rows, GB/s tiled / plain, llama.cpp: 7168 columns Q3_K 13.3 / 12.0,
// 13.2; Q6_K 27 / 26, 27; 12288 columns Q3_K 13 / 10, 10.5; Q6_K 21 / 16,
// 15.5; 2048 rows of 18432 Q3_K 14 / 9, 9; Q6_K 19-26 / 10.5, 10.5.
const prepMaxBlocks = 20

// q45TileBlocks is where Q4_K and Q5_K rows start to run tile by tile: up
// to 32 blocks their plain kernels stream as fast (the activation row
// still shares L1 with the weights), beyond they halve. Measured on Zen 4,
// 1 thread, vnni256, GB/s tiled / plain, llama.cpp (with its Q4_K
// repacked): 7168 columns Q4_K 14-19 / 21, 22; 8192 Q4_K 20 / 19-21;
// 10240 Q4_K 22 / 21, Q5_K 20 / 18-19; 12288 Q4_K 20-21 / 13-15; 14336
// Q4_K 21 / 12, 20, Q5_K 21 / 11, 11.5; 18432 (2048 rows) Q4_K 21 / 11,
// 21, Q5_K 22 / 10, 9.
const q45TileBlocks = 32

// use reports whether rows of n elements are prepared: those of up to
// prepMaxBlocks blocks, and those run tile by tile.
func (p *prepared) use(n int) bool { return p.tiled(n) || n/quant.QK_K <= prepMaxBlocks }

// tiled reports whether MatVec runs rows of n elements tile by tile: the
// type has a tile kernel and the rows are longer than tileMin blocks.
func (p *prepared) tiled(n int) bool { return p.tile != nil && n/quant.QK_K > p.tileMin }

// addPrepared registers f's prepared-row kernels: Dot prepares its row and
// calls them; MatVec and MatMul with fewer than four activation rows (more
// run the Q8_K four-row kernels, or the tile kernels of several rows where
// the rows run tile by tile) prepare every activation row once.
func (l *level) addPrepared(f Funcs) {
	for _, p := range []struct {
		t       quant.Type
		off     int
		dot     func(w, a *byte, nb int) float32
		bsum    bool
		tile    func(w, a *byte, nb int, acc *[9]float32, pf *byte)
		tileMin int
		tileN   [3]func(w, a *byte, nb, astride int, acc *float32, pf *byte)
	}{{quant.Q3_K, 4, f.Q3KP, false, f.Q3KPT, prepMaxBlocks, f.Q3KxPT}, {quant.Q6_K, 32, f.Q6KP, false, f.Q6KPT, prepMaxBlocks, f.Q6KxPT},
		{quant.Q4_K, 0, f.Q4KP, true, f.Q4KPT, q45TileBlocks, noTileN}, {quant.Q5_K, 0, f.Q5KP, true, f.Q5KPT, q45TileBlocks, noTileN}} {
		if p.dot == nil {
			continue
		}
		if l.prep == nil {
			l.prep = map[quant.Type]*prepared{}
		}
		pr := &prepared{off: p.off, bsum: p.bsum, prep: f.PrepQ8K, dot: prepDot(p.dot, p.t.TypeSize()), raw: l.dotOf(p.t),
			tile: p.tile, tileMin: p.tileMin, wsize: p.t.TypeSize()}
		copy(pr.tileN[2:], p.tileN[:])
		l.prep[p.t] = pr
		l.dot[p.t] = func(n int, w, a []byte) float32 {
			// One row gains nothing from a tile: it reads the row once.
			if n/quant.QK_K > prepMaxBlocks {
				return pr.raw(n, w, a)
			}
			bp := prepPool.Get().(*[]byte)
			pa := pr.rows(a, n, q8KSize*(n/quant.QK_K), 1, bp)
			s := pr.dot(n, w, pa)
			prepPool.Put(bp)
			return s
		}
	}
}

var prepPool = sync.Pool{New: func() any { return new([]byte) }}

// noTileN is a type without tile kernels of several rows.
var noTileN [3]func(w, a *byte, nb, astride int, acc *float32, pf *byte)

// rows prepares m Q8_K rows of n elements, arow bytes apart, into *bp
// (grown as needed) and returns them back to back.
func (p *prepared) rows(a []byte, n, arow, m int, bp *[]byte) []byte {
	nb := n / quant.QK_K
	size := m * nb * prepBlock
	if cap(*bp) < size+63 {
		*bp = make([]byte, size+63)
	}
	b := *bp
	b = b[:cap(b)]
	al := int(-uintptr(unsafe.Pointer(&b[0])) & 63)
	dst := b[al : al+size]
	for j := range m {
		if p.prep != nil {
			p.prep(&a[j*arow], nb, &dst[j*nb*prepBlock], p.off)
			continue
		}
		prepRow(a[j*arow:j*arow+nb*q8KSize], nb, dst[j*nb*prepBlock:(j+1)*nb*prepBlock], p.off)
	}
	if p.bsum {
		// The Q4_K/Q5_K kernels need no offset words (off 0) but the
		// bsums for the mins: their sums over 32 elements are the same in
		// lane order.
		for j := range m {
			for b := range nb {
				src := a[j*arow+b*q8KSize+260 : j*arow+(b+1)*q8KSize] // Q8_K: d, 256 quants, 16 bsums
				d := dst[(j*nb+b)*prepBlock:]
				copy(d[prepBsums:], src)
				for k := range 8 {
					s := int16(binary.LittleEndian.Uint16(src[4*k:])) + int16(binary.LittleEndian.Uint16(src[4*k+2:]))
					binary.LittleEndian.PutUint16(d[prepPairs+2*k:], uint16(s))
				}
			}
		}
	}
	return dst
}

// PrepareQ8K prepares the nb Q8_K blocks of a into dst (nb*576 bytes) with
// the quant offset off, in Go: the reference a plugin's Funcs.PrepQ8K
// must match byte for byte (bytes 516..575 of each block are zero here and
// never read).
func PrepareQ8K(a []byte, nb int, dst []byte, off int) { prepRow(a, nb, dst, off) }

// prepRow prepares the nb Q8_K blocks of a into dst.
func prepRow(a []byte, nb int, dst []byte, off int) {
	for b := range nb {
		src := a[b*q8KSize : (b+1)*q8KSize]
		d := dst[b*prepBlock : (b+1)*prepBlock]
		qs := src[4 : 4+quant.QK_K]
		for r := 0; r < quant.QK_K; r += 32 {
			run, out := qs[r:r+32], d[r:r+32]
			for p := range 32 {
				out[p] = run[p/4+8*(p%4)]
			}
		}
		for i := range quant.QK_K / 2 {
			v := off * (int(int8(d[2*i])) + int(int8(d[2*i+1])))
			binary.LittleEndian.PutUint16(d[prepOff+2*i:], uint16(int16(v)))
		}
		copy(d[prepD:prepD+4], src[:4])
		clear(d[prepD+4:])
	}
}

func prepDot(f func(w, a *byte, nb int) float32, wsize int) dotFunc {
	return func(n int, w, a []byte) float32 {
		nb := n / quant.QK_K
		if nb == 0 {
			return 0
		}
		w, a = w[:nb*wsize], a[:nb*prepBlock]
		return f(&w[0], &a[0], nb)
	}
}

// The compact prepared layout of MatMul's Q4_K/Q5_K four-row kernels
// (tools/asmgen/q4mm.go) holds four activation rows interleaved, per Q8_K
// block a group of prep45Block bytes: the four rows' quants in lane order
// (as above), their four d, their eight bsum pairs bsums[2k]+bsums[2k+1]
// as int16 each (rows 0, 2, 1, 3: the order the kernels reduce them in),
// zero padding to a multiple of 64. A group is a little
// smaller than four Q8_K blocks.
const (
	prep45D     = 1024
	prep45Pairs = 1040
	prep45Block = 1152
)

// prepared4 is one type's four-row kernel on compact prepared rows.
type prepared4 struct {
	prep func(a *byte, astride, nb int, dst *byte) // nil: prepGroup45
	dot4 dot4Func
}

// addPrepared4 registers f's four-row kernels on compact prepared rows.
func (l *level) addPrepared4(f Funcs) {
	for t, fn := range map[quant.Type]func(w, a *byte, nb, astride int, out *float32){
		quant.Q4_K: f.Q4Kx4P, quant.Q5_K: f.Q5Kx4P,
	} {
		if fn == nil {
			continue
		}
		if l.prep4 == nil {
			l.prep4 = map[quant.Type]*prepared4{}
		}
		wsize := t.TypeSize()
		l.prep4[t] = &prepared4{prep: f.PrepQ45, dot4: func(n int, w, a []byte, astride int, out *[4]float32) {
			nb := n / quant.QK_K
			if nb == 0 {
				*out = [4]float32{}
				return
			}
			// The kernel reads one group of four rows; astride is a
			// quarter of it.
			w, a = w[:nb*wsize], a[:nb*prep45Block]
			fn(&w[0], &a[0], nb, astride, &out[0])
		}}
	}
}

// rows prepares m Q8_K rows of n elements (m a multiple of four), arow
// bytes apart, into *bp (grown as needed, 64-byte aligned) as m/4 groups
// back to back, and returns them with a quarter of a group's size, what
// MatMul advances by per row.
func (p *prepared4) rows(a []byte, n, arow, m int, bp *[]byte) ([]byte, int) {
	nb := n / quant.QK_K
	group := nb * prep45Block
	size := m / 4 * group
	if cap(*bp) < size+63 {
		*bp = make([]byte, size+63)
	}
	b := (*bp)[:cap(*bp)]
	al := int(-uintptr(unsafe.Pointer(&b[0])) & 63)
	dst := b[al : al+size]
	for g := 0; g < m/4 && nb > 0; g++ {
		src := a[4*g*arow : 4*g*arow+3*arow+nb*q8KSize]
		if p.prep != nil {
			p.prep(&src[0], arow, nb, &dst[g*group])
			continue
		}
		prepGroup45(src, arow, nb, dst[g*group:(g+1)*group])
	}
	return dst, group / 4
}

// PrepareQ45 prepares the four Q8_K rows of nb blocks at a, arow bytes
// apart, into dst (nb*1152 bytes) in the compact layout, in Go: the
// reference a plugin's Funcs.PrepQ45 must match byte for byte.
func PrepareQ45(a []byte, arow, nb int, dst []byte) { prepGroup45(a, arow, nb, dst) }

func prepGroup45(a []byte, arow, nb int, dst []byte) {
	for b := range nb {
		g := dst[b*prep45Block : (b+1)*prep45Block]
		clear(g[prep45Pairs:])
		for r := range 4 {
			src := a[r*arow+b*q8KSize : r*arow+(b+1)*q8KSize]
			qs, out := src[4:4+quant.QK_K], g[256*r:256*(r+1)]
			for i := range quant.QK_K {
				out[i] = qs[i&^31+i%32/4+8*(i%4)]
			}
			copy(g[prep45D+4*r:], src[:4])
			for k := range 8 {
				s := int16(binary.LittleEndian.Uint16(src[260+4*k:])) + int16(binary.LittleEndian.Uint16(src[262+4*k:]))
				binary.LittleEndian.PutUint16(g[prep45Pairs+16*[4]int{0, 2, 1, 3}[r]+2*k:], uint16(s))
			}
		}
	}
}

// tileBlocks bounds a tile: a prepared tile of 16 blocks (9 KiB) stays in
// L1 while a band of weight rows streams through it.
const tileBlocks = 16

// tileBand is how many weight rows run over one tile before the next, their
// float lanes waiting in a small array (measured on Zen 4, 7168 columns:
// 4 and 8 rows about equal, 16 and 32 slower).
const tileBand = 8

// tiledRange computes out[i] for weight rows [r0, r1) of n elements, wrow
// bytes apart, on the prepared row a, tile by tile. A row's eight float
// lanes are carried from tile to tile as they are, and summed in lane order
// at the end: the float operations and their order are the one-call
// kernel's, so the result is bit-identical.
func (p *prepared) tiledRange(n int, w []byte, wrow, r0, r1 int, a []byte, out []float32) {
	nb := n / quant.QK_K
	tiles := (nb + tileBlocks - 1) / tileBlocks
	var acc [tileBand][9]float32
	for i0 := r0; i0 < r1; i0 += tileBand {
		i1 := min(i0+tileBand, r1)
		band := acc[:i1-i0]
		clear(band)
		// Rows read side by side a tile at a time are streams the hardware
		// prefetchers lose (measured: 5 GB/s instead of 23 on Zen 4). The
		// band's rows are one contiguous span, and so are the next band's:
		// each block prefetches its share of the next span, in order, so
		// that memory sees one sequential stream, a band ahead.
		next := i1 * wrow
		if i1 >= r1 {
			next = i0 * wrow // nothing to fetch: a harmless address
		}
		pf := 0
		b0 := 0
		for t := range tiles {
			tb := (nb - b0) / (tiles - t) // tiles as even as they divide
			ap := &a[b0*prepBlock]
			for k := range band {
				p.tile(&w[(i0+k)*wrow+b0*p.wsize], ap, tb, &band[k], &w[min(next+pf, len(w)-1)])
				pf += tb * p.wsize
			}
			b0 += tb
		}
		for k, l := range band {
			// The one-call kernels' final sum: Q3_K/Q6_K lane 0 first, not
			// +0 (lanesInOrder); Q4_K/Q5_K sumf (l[8]) plus the lanes.
			s, lanes := l[0], l[1:8]
			if p.bsum {
				s, lanes = l[8], l[:8]
			}
			for _, v := range lanes {
				s += v
			}
			out[i0+k] = s
		}
	}
}

// tileRowsBytes bounds a tile of several rows: m prepared tiles of
// tileRowsBytes/m/prepBlock blocks (18 KiB in all: four rows of 8 blocks,
// two of 16) stay in L1 while a band of weight rows streams through them.
const tileRowsBytes = 32 * prepBlock

// tiledRangeN is tiledRange on m = 2..4 prepared rows, astride bytes
// apart, with tileN[m]: out[j*ostride+i] is row j's output of weight row
// i. Each row's float lanes go through the same operations in the same
// order as tiledRange's, so every output is bit-identical to it.
func (p *prepared) tiledRangeN(m, n int, w []byte, wrow, r0, r1 int, a []byte, astride int, out []float32, ostride int) {
	nb := n / quant.QK_K
	tiles := (nb + tileRowsBytes/m/prepBlock - 1) / (tileRowsBytes / m / prepBlock)
	tile := p.tileN[m]
	var acc [tileBand][36]float32
	for i0 := r0; i0 < r1; i0 += tileBand {
		i1 := min(i0+tileBand, r1)
		band := acc[:i1-i0]
		clear(band)
		next := i1 * wrow // the next band's span, prefetched as tiledRange does
		if i1 >= r1 {
			next = i0 * wrow
		}
		pf := 0
		b0 := 0
		for t := range tiles {
			tb := (nb - b0) / (tiles - t)
			ap := &a[b0*prepBlock]
			for k := range band {
				tile(&w[(i0+k)*wrow+b0*p.wsize], ap, tb, astride, &band[k][0], &w[min(next+pf, len(w)-1)])
				pf += tb * p.wsize
			}
			b0 += tb
		}
		for k := range band {
			for j := range m {
				l := band[k][9*j : 9*j+9]
				s, lanes := l[0], l[1:8]
				if p.bsum {
					s, lanes = l[8], l[:8]
				}
				for _, v := range lanes {
					s += v
				}
				out[j*ostride+i0+k] = s
			}
		}
	}
}
