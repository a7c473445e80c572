package quant

import (
	"fmt"
	"sync"
)

// Shared machinery of the grid IQ quantizers (ggml-quants.c:
// iq2xs_init_impl, iq2_find_best_neighbour, make_qp_quants).
//
// The quantizers search over points of a lattice of 8 levels per weight
// (2-bit codes l, value 2l+1); only some points are on the type's grid. For
// every lattice point not on the grid, ggml precomputes the grid points at
// the nwant smallest distinct squared distances, and a search falls back to
// the best of those.

// iqLattice is ggml's iq2_data entry for one grid: the grid as lattice
// values, the map from lattice index (2 bits per weight) to grid index, and
// each off-grid point's neighbours.
type iqLattice struct {
	dim, bits  int        // weights per grid point (8 or 4), code bits per weight (2 or 3)
	grid       [][8]int8  // the_grid: 2l+1 per weight (first dim used)
	gridMap    []int32    // kmap: grid index, or -1 off the grid
	neighbours [][]uint16 // per lattice index off the grid, in ggml's order
}

// iq2KmapSize is iq2xs_init_impl's kmap_size: lattice indices whose codes
// are all at most 2 (the grids use three levels per weight). iq3xs_init_impl
// maps all 4096 of its 4x3-bit codes.
const (
	iq2KmapSize = 43692
	iq3KmapSize = 4096
)

// iqLevels maps a grid table's byte values to their 2-bit lattice code.
type iqLevels map[uint8]int

var (
	iq2Levels    = iqLevels{0x08: 0, 0x19: 1, 0x2b: 2}
	iq1Levels    = iqLevels{0xff: 0, 0x00: 1, 0x01: 2}
	iq3XXSLevels = iqLevels{0x04: 0, 0x0c: 1, 0x14: 2, 0x1c: 3, 0x24: 4, 0x2c: 5, 0x34: 6, 0x3e: 7}
	iq3SLevels   = iqLevels{1: 0, 3: 1, 5: 2, 7: 3, 9: 4, 11: 5, 13: 6, 15: 7}
)

// kgrid returns ggml's kgrid_* table for grid g (the lattice codes of each
// grid point, bits per weight, dim weights), derived from the
// dequantization grid.
func kgrid(g []uint64, levels iqLevels, dim, bits int) []uint16 {
	out := make([]uint16, len(g))
	for k, v := range g {
		var u uint16
		for i := 0; i < dim; i++ {
			l, ok := levels[gridByte(v, i)]
			if !ok {
				panic(fmt.Sprintf("quant: grid entry %d byte %d = %#x is not a level", k, i, gridByte(v, i)))
			}
			u |= uint16(l) << (bits * i)
		}
		out[k] = u
	}
	return out
}

// widen returns a uint32 grid as uint64s.
func widen(g []uint32) []uint64 {
	out := make([]uint64, len(g))
	for i, v := range g {
		out[i] = uint64(v)
	}
	return out
}

// KGrid exposes kgrid for the check against ggml-quants.c's kgrid_* tables:
// name is the ggml table's name.
func KGrid(name string) []uint16 {
	switch name {
	case "kgrid_2bit_256":
		return kgrid(iq2xxsGrid[:], iq2Levels, 8, 2)
	case "kgrid_2bit_512":
		return kgrid(iq2xsGrid[:], iq2Levels, 8, 2)
	case "kgrid_2bit_1024":
		return kgrid(iq2sGrid[:], iq2Levels, 8, 2)
	case "kgrid_1bit_2048":
		return kgrid(iq1sGrid[:], iq1Levels, 8, 2)
	case "kgrid_256":
		return kgrid(widen(iq3xxsGrid[:]), iq3XXSLevels, 4, 3)
	case "kgrid_512":
		return kgrid(widen(iq3sGrid[:]), iq3SLevels, 4, 3)
	}
	return nil
}

// newIQLattice is iq2xs_init_impl (dim 8, 2 bits) or iq3xs_init_impl
// (dim 4, 3 bits) for a grid with the given kgrid codes, kmapSize lattice
// indices and neighbour depth nwant.
func newIQLattice(codes []uint16, dim, bits, kmapSize, nwant int) *iqLattice {
	lat := &iqLattice{dim: dim, bits: bits, grid: make([][8]int8, len(codes)), gridMap: make([]int32, kmapSize),
		neighbours: make([][]uint16, kmapSize)}
	for i := range lat.gridMap {
		lat.gridMap[i] = -1
	}
	mask := 1<<bits - 1
	for k, c := range codes {
		for i := 0; i < dim; i++ {
			lat.grid[k][i] = int8(2*((int(c)>>(bits*i))&mask) + 1)
		}
		lat.gridMap[c] = int32(k)
	}
	dist := make([]int32, len(codes))
	var near []int32 // the nwant smallest distinct distances, ascending
	for i := 0; i < kmapSize; i++ {
		if lat.gridMap[i] >= 0 {
			continue
		}
		var pos [8]int32
		for k := 0; k < dim; k++ {
			pos[k] = int32(2*((i>>(bits*k))&mask) + 1)
		}
		near = near[:0]
		for j := range lat.grid {
			var d2 int32
			for k := 0; k < dim; k++ {
				d := int32(lat.grid[j][k]) - pos[k]
				d2 += d * d
			}
			dist[j] = d2
			near = insertDistinct(near, d2, nwant)
		}
		// ggml sorts (distance, index) pairs and keeps every pair within
		// the nwant smallest distances: by distance, then by index.
		var list []uint16
		for _, d := range near {
			for j, dj := range dist {
				if dj == d {
					list = append(list, uint16(j))
				}
			}
		}
		lat.neighbours[i] = list
	}
	return lat
}

// insertDistinct adds d to the ascending list s of at most n distinct values.
func insertDistinct(s []int32, d int32, n int) []int32 {
	k := 0
	for k < len(s) && s[k] < d {
		k++
	}
	if k < len(s) && s[k] == d {
		return s
	}
	if k >= n {
		return s
	}
	if len(s) < n {
		s = append(s, 0)
	}
	copy(s[k+1:], s[k:len(s)-1])
	s[k] = d
	return s
}

// bestNeighbour is iq2_find_best_neighbour: the neighbour of the off-grid
// lattice point u closest to xval at scale, by weighted squared error; it
// writes that grid point's codes to L and returns its index.
func (lat *iqLattice) bestNeighbour(u int, xval, weight []float32, scale float32, L []int8) int {
	best := float32(maxFloat32)
	index := -1
	for _, nb := range lat.neighbours[u] {
		pg := &lat.grid[nb]
		var d2 float32
		for i := 0; i < lat.dim; i++ {
			diff := float32(scale*float32(pg[i])) - xval[i]
			d2 += float32(float32(weight[i]*diff) * diff)
		}
		if d2 < best {
			best, index = d2, int(nb)
		}
	}
	if index < 0 {
		// Only NaN distances get here; ggml asserts.
		index = int(lat.neighbours[u][0])
	}
	for i := 0; i < lat.dim; i++ {
		L[i] = (lat.grid[index][i] - 1) / 2
	}
	return index
}

const maxFloat32 = float32(3.40282346638528859811704183484516925440e+38)

// lazyLattice builds a lattice on first use: the neighbour tables take
// tens of milliseconds (IQ1's grid of 2048, seconds) and most processes
// never quantize to IQ types.
type lazyLattice struct {
	once  sync.Once
	lat   *iqLattice
	build func() *iqLattice
}

func (l *lazyLattice) get() *iqLattice {
	l.once.Do(func() { l.lat = l.build() })
	return l.lat
}

// The lattices ggml's iq2_data holds: IQ2_XXS (nwant 2), IQ2_XS (2),
// IQ1_S and IQ1_M (3), IQ2_S (1).
var (
	iq2XXSLattice = iq2Lattice("kgrid_2bit_256", 2)
	iq2XSLattice  = iq2Lattice("kgrid_2bit_512", 2)
	iq2SLattice   = iq2Lattice("kgrid_2bit_1024", 1)
	iq1Lattice    = iq2Lattice("kgrid_1bit_2048", 3)
	// iq3xs_init_impl: IQ3_XXS (nwant 2), IQ3_S (3).
	iq3XXSLattice = &lazyLattice{build: func() *iqLattice { return newIQLattice(KGrid("kgrid_256"), 4, 3, iq3KmapSize, 2) }}
	iq3SLattice   = &lazyLattice{build: func() *iqLattice { return newIQLattice(KGrid("kgrid_512"), 4, 3, iq3KmapSize, 3) }}
)

func iq2Lattice(kgridName string, nwant int) *lazyLattice {
	return &lazyLattice{build: func() *iqLattice { return newIQLattice(KGrid(kgridName), 8, 2, iq2KmapSize, nwant) }}
}

// maxC is C's MAX(a, b) on floats: a > b ? a : b (NaN b wins, NaN a loses).
func maxC(a, b float32) float32 {
	if a > b {
		return a
	}
	return b
}

// makeQpQuants is make_qp_quants: fit x (non-negative) ≈ scale*L with L in
// [0, nmax] under importance weights qw, trying nine inverse scales and then
// moving single quants while the weighted fit improves.
func makeQpQuants(nmax int, x []float32, L []uint8, qw []float32) float32 {
	var max float32
	for _, v := range x {
		max = maxC(max, v)
	}
	if max < groupMaxEps {
		for i := range x {
			L[i] = 0
		}
		return 0
	}
	fnmax := float32(nmax)
	iscale := fnmax / max
	for i, v := range x {
		L[i] = uint8(nearestInt(float32(iscale * v)))
	}
	scale := 1 / iscale
	var bestMSE float32
	for i, v := range x {
		diff := v - float32(scale*float32(L[i]))
		bestMSE += float32(float32(qw[i]*diff) * diff)
	}
	for is := -4; is <= 4; is++ {
		if is == 0 {
			continue
		}
		iscaleIs := (float32(float32(0.1)*float32(is)) + fnmax) / max
		scaleIs := 1 / iscaleIs
		var mse float32
		for i, v := range x {
			l := min(nmax, nearestInt(float32(iscaleIs*v)))
			diff := v - float32(scaleIs*float32(l))
			mse += float32(float32(qw[i]*diff) * diff)
		}
		if mse < bestMSE {
			bestMSE, iscale = mse, iscaleIs
		}
	}
	var sumlx, suml2 float32
	for i, v := range x {
		l := min(nmax, nearestInt(float32(iscale*v)))
		L[i] = uint8(l)
		w := qw[i]
		fl := float32(l)
		sumlx += float32(float32(w*v) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	for itry := 0; itry < 5; itry++ {
		changed := 0
		for i, v := range x {
			w := qw[i]
			li := float32(L[i])
			slx := sumlx - float32(float32(w*v)*li)
			sl2 := suml2 - float32(float32(w*li)*li)
			if slx > 0 && sl2 > 0 {
				newL := min(nmax, nearestInt(float32(v*sl2)/slx))
				if newL != int(L[i]) {
					fn := float32(newL)
					slx += float32(float32(w*v) * fn)
					sl2 += float32(float32(w*fn) * fn)
					if float32(float32(slx*slx)*suml2) > float32(float32(sumlx*sumlx)*sl2) {
						L[i] = uint8(newL)
						sumlx, suml2 = slx, sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// iqSigma2 is the mean square of a super-block, the sigma2 of ggml's IQ
// importance weights qw[i]*sqrt(sigma2 + x[i]^2).
func iqSigma2(xbl []float32) float32 {
	var sumx2 float32
	for _, v := range xbl {
		sumx2 += float32(v * v)
	}
	return sumx2 / float32(len(xbl))
}

// QuantizeImatrix encodes src, rows of nPerRow elements, as
// ggml_quantize_chunk does with an importance matrix: imatrix holds one
// weight per column and applies to every row. A nil imatrix quantizes as
// Quantize does; types that need one (RequiresImatrix) fail without it.
func QuantizeImatrix(t Type, src []float32, dst []byte, nPerRow int, imatrix []float32) error {
	im := impls[t]
	if im == nil || (im.quantizeImatrix == nil && (imatrix != nil || im.quantize == nil)) {
		return fmt.Errorf("quant: quantize to %s with an importance matrix is not supported", t)
	}
	if nPerRow <= 0 || len(src)%nPerRow != 0 {
		return fmt.Errorf("quant: %d elements are not whole rows of %d", len(src), nPerRow)
	}
	if err := checkSizes(t, nPerRow, len(dst), "quantize"); err != nil {
		return err
	}
	if err := checkSizes(t, len(src), len(dst), "quantize"); err != nil {
		return err
	}
	if imatrix != nil && len(imatrix) != nPerRow {
		return fmt.Errorf("quant: importance matrix of %d values for rows of %d", len(imatrix), nPerRow)
	}
	if imatrix == nil && RequiresImatrix(t) {
		return fmt.Errorf("quant: %s needs an importance matrix", t)
	}
	if im.quantizeImatrix == nil {
		im.quantize(src, dst)
		return nil
	}
	rb, _ := RowSize(t, int64(nPerRow))
	for r := 0; r < len(src)/nPerRow; r++ {
		im.quantizeImatrix(src[r*nPerRow:(r+1)*nPerRow], dst[int64(r)*rb:int64(r+1)*rb], imatrix)
	}
	return nil
}

// RequiresImatrix is ggml_quantize_requires_imatrix: the types ggml will
// not quantize without an importance matrix.
func RequiresImatrix(t Type) bool { return t == IQ2_XXS || t == IQ2_XS || t == IQ1_S }
