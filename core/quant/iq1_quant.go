package quant

import (
	"encoding/binary"
	"sort"
)

// Reference quantizers of the 1-bit grid types (ggml-quants.c:
// quantize_row_iq1_s_impl, quantize_row_iq1_m_impl). With three values per
// weight, each group's best split of its sorted weights into -1, 0 and +1
// is found exhaustively, then snapped to the grid. Float operations follow
// C's order and rounding.

func init() {
	impls[IQ1_S].quantizeImatrix = quantizeIQ1S
	impls[IQ1_M].quantizeImatrix = quantizeIQ1M
	impls[IQ1_M].quantize = func(src []float32, dst []byte) { quantizeIQ1M(src, dst, nil) }
}

const (
	groupMaxEpsIQ1S = float32(1e-12) // GROUP_MAX_EPS_IQ1_S
	groupMaxEpsIQ1M = float32(1e-7)  // GROUP_MAX_EPS_IQ1_M
)

// The grid values shifted by +delta (x_p) and -delta (x_m).
var (
	iq1XP = [3]float32{-1 + iq1Delta, iq1Delta, 1 + iq1Delta}
	iq1XM = [3]float32{-1 - iq1Delta, -iq1Delta, 1 - iq1Delta}
)

// iq1SortedOrder returns the indices of xb in ascending order of value. ggml
// sorts with qsort, which in glibc up to 2.36 (the reference machine's) is
// a stable merge sort for arrays this small, so equal values keep their
// order; a stable sort reproduces it.
func iq1SortedOrder(xb []float32, idx []int) {
	for j := range idx {
		idx[j] = j
	}
	sort.SliceStable(idx, func(a, b int) bool { return xb[idx[a]] < xb[idx[b]] })
}

// bestNeighbour2 is iq1_find_best_neighbour2: the neighbour of off-grid
// point u with the smallest weighted error against xval at scale, the
// codes mapping to values xg.
func (lat *iqLattice) bestNeighbour2(u int, xval, weight []float32, scale float32, xg *[3]float32, L []int8) int {
	best := maxFloat32
	index := -1
	for _, nb := range lat.neighbours[u] {
		pg := &lat.grid[nb]
		var d2 float32
		for i := 0; i < 8; i++ {
			q := xg[(pg[i]-1)/2]
			diff := float32(scale*q) - xval[i]
			d2 += float32(float32(weight[i]*diff) * diff)
		}
		if d2 < best {
			best, index = d2, int(nb)
		}
	}
	if index < 0 {
		// Only NaN distances get here, where ggml reads out of bounds.
		index = int(lat.neighbours[u][0])
	}
	for i := 0; i < 8; i++ {
		L[i] = (lat.grid[index][i] - 1) / 2
	}
	return index
}

// iq1Snap maps the codes of each group of 8 in L to a grid index, moving
// off-grid groups to their best neighbour; xgOf gives group k's values.
// It reports whether every group was on the grid.
func (lat *iqLattice) iq1Snap(xb, weight []float32, scale float32, L []int8, index []int, xgOf func(k int) *[3]float32) bool {
	all := true
	for k := range index {
		u := iq2Code(L[8*k:])
		g := int(lat.gridMap[u])
		if g < 0 {
			all = false
			g = lat.bestNeighbour2(u, xb[8*k:8*k+8], weight[8*k:8*k+8], scale, xgOf(k), L[8*k:8*k+8])
		}
		index[k] = g
	}
	return all
}

// iq1Refit is the scale refit after snapping: sum w*q*x / sum w*q*q over
// the grid points chosen, when both are positive.
func (lat *iqLattice) iq1Refit(xb, weight []float32, index []int, xgOf func(k int) *[3]float32, scale float32) float32 {
	var sumqx, sumq2 float32
	for k, g := range index {
		xx := xgOf(k)
		pg := &lat.grid[g]
		for j := 0; j < 8; j++ {
			w := weight[8*k+j]
			q := xx[(pg[j]-1)/2]
			sumqx += float32(float32(w*q) * xb[8*k+j])
			sumq2 += float32(float32(w*q) * q)
		}
	}
	if sumqx > 0 && sumq2 > 0 {
		return sumqx / sumq2
	}
	return scale
}

// iq1Weights fills weight for the weights xb: qw*sqrt(sigma2 + x^2) with an
// importance matrix, x^2 without.
func iq1Weights(xb, qw []float32, sigma2 float32, weight []float32) {
	for i, v := range xb {
		if qw != nil {
			weight[i] = qw[i] * sqrt32(sigma2+float32(v*v))
		} else {
			weight[i] = v * v
		}
	}
}

func absMaxC(xb []float32) float32 {
	max := abs32(xb[0])
	for _, v := range xb[1:] {
		max = maxC(max, abs32(v))
	}
	return max
}

// quantizeIQ1S is quantize_row_iq1_s_impl (qw is required).
func quantizeIQ1S(src []float32, dst []byte, qw []float32) {
	const bs = 32
	lat := iq1Lattice.get()
	var (
		scales     [8]float32
		shifts     [8]int
		weight     [bs]float32
		sumx, sumw [bs + 1]float32
		idx        [bs]int
		L          [bs]int8
		index      [4]int
	)
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		blk := dst[ibl*iq1SBytes : (ibl+1)*iq1SBytes]
		clear(blk)
		xbl := src[QK_K*ibl : QK_K*(ibl+1)]
		sigma2 := iq3Sigma2(xbl)
		var maxScale float32
		for ib := 0; ib < QK_K/bs; ib++ {
			xb := xbl[bs*ib : bs*ib+bs]
			iq1Weights(xb, qw[QK_K*ibl+bs*ib:], sigma2, weight[:])
			max := absMaxC(xb)
			if max < groupMaxEpsIQ1S {
				scales[ib], shifts[ib] = 0, 1
				continue
			}
			iq1SortedOrder(xb, idx[:])
			for j := 0; j < bs; j++ {
				i := idx[j]
				sumx[j+1] = sumx[j] + float32(weight[i]*xb[i])
				sumw[j+1] = sumw[j] + weight[i]
			}
			bestScore, scale := -maxFloat32, max
			besti1, besti2, bestShift := -1, -1, 0
			for i1 := 0; i1 <= bs; i1++ {
				for i2 := i1; i2 <= bs; i2++ {
					a, b, c := sumx[i1]-sumx[0], sumx[i2]-sumx[i1], sumx[bs]-sumx[i2]
					wa, wb, wc := sumw[i1]-sumw[0], sumw[i2]-sumw[i1], sumw[bs]-sumw[i2]
					for _, sh := range [2]int{1, -1} {
						xx := &iq1XP
						if sh < 0 {
							xx = &iq1XM
						}
						sumqx := float32(float32(a*xx[0])+float32(b*xx[1])) + float32(c*xx[2])
						sumq2 := float32(float32(float32(wa*xx[0])*xx[0])+float32(float32(wb*xx[1])*xx[1])) +
							float32(float32(wc*xx[2])*xx[2])
						if sumq2 > 0 && float32(sumqx*sumqx) > float32(bestScore*sumq2) {
							scale = sumqx / sumq2
							bestScore = scale * sumqx
							besti1, besti2, bestShift = i1, i2, sh
						}
					}
				}
			}
			if besti1 < 0 || besti2 < 0 || bestShift == 0 {
				scales[ib], shifts[ib] = 0, 1
				continue
			}
			for j := 0; j < bs; j++ {
				switch {
				case j < besti1:
					L[idx[j]] = 0
				case j < besti2:
					L[idx[j]] = 1
				default:
					L[idx[j]] = 2
				}
			}
			if scale < 0 {
				for j := range L {
					L[j] = 2 - L[j]
				}
				scale, bestShift = -scale, -bestShift
			}
			xx := &iq1XP
			if bestShift != 1 {
				xx = &iq1XM
			}
			xgOf := func(int) *[3]float32 { return xx }
			if !lat.iq1Snap(xb, weight[:], scale, L[:], index[:], xgOf) {
				scale = lat.iq1Refit(xb, weight[:], index[:], xgOf, scale)
			}
			var h uint16
			for k := 0; k < 4; k++ {
				blk[2+4*ib+k] = uint8(index[k])
				h |= uint16(index[k]>>8) << (3 * k)
			}
			binary.LittleEndian.PutUint16(blk[34+2*ib:], h)
			scales[ib], shifts[ib] = scale, bestShift
			maxScale = maxC(maxScale, scale)
		}
		if maxScale == 0 {
			continue
		}
		d := maxScale / 15
		putF16(blk, d*1.125)
		id := 1 / d
		for ib := 0; ib < QK_K/bs; ib++ {
			l := clampInt(nearestInt(float32(0.5*(float32(id*scales[ib])-1))), 0, 7)
			if shifts[ib] == -1 {
				l |= 8
			}
			h := binary.LittleEndian.Uint16(blk[34+2*ib:])
			binary.LittleEndian.PutUint16(blk[34+2*ib:], h|uint16(l)<<12)
		}
	}
}

// iq1MXX returns the values of group k (0 or 1) of a 16-weight block with
// shift pattern k4 (0: +,+  1: +,-  2: -,+  3: -,-).
func iq1MXX(k4, k int) *[3]float32 {
	if (k == 0 && k4 < 2) || (k == 1 && k4%2 == 0) {
		return &iq1XP
	}
	return &iq1XM
}

// quantizeIQ1M is quantize_row_iq1_m_impl; without qw it weighs by x^2.
func quantizeIQ1M(src []float32, dst []byte, qw []float32) {
	const bs = 16
	lat := iq1Lattice.get()
	masks := [4]uint8{0x00, 0x80, 0x08, 0x88}
	var (
		scales [16]float32
		shifts [16]int
		weight [bs]float32
		idx    [bs]int
		L      [bs]int8
		index  [2]int
	)
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		blk := dst[ibl*iq1MBytes : (ibl+1)*iq1MBytes]
		clear(blk)
		qs, qh, sc := blk[:32], blk[32:48], blk[48:56]
		xbl := src[QK_K*ibl : QK_K*(ibl+1)]
		sigma2 := iq3Sigma2(xbl)
		var maxScale float32
		for ib := 0; ib < QK_K/bs; ib++ {
			xb := xbl[bs*ib : bs*ib+bs]
			var qwb []float32
			if qw != nil {
				qwb = qw[QK_K*ibl+bs*ib:]
			}
			iq1Weights(xb, qwb, sigma2, weight[:])
			max := absMaxC(xb)
			if max < groupMaxEpsIQ1M {
				scales[ib], shifts[ib] = 0, 0
				continue
			}
			iq1SortedOrder(xb, idx[:])
			bestScore, scale := -maxFloat32, max
			besti1, besti2, bestK := -1, -1, -1
			for i1 := 0; i1 <= bs; i1++ {
				for i2 := i1; i2 <= bs; i2++ {
					var sumqx, sumq2 [4]float32
					for j := 0; j < bs; j++ {
						lv := 2
						if j < i1 {
							lv = 0
						} else if j < i2 {
							lv = 1
						}
						i := idx[j]
						w := weight[i]
						p, m := iq1XP[lv], iq1XM[lv]
						px := float32(float32(w*p) * xb[i])
						mx := float32(float32(w*m) * xb[i])
						pp := float32(float32(w*p) * p)
						mm := float32(float32(w*m) * m)
						if i < bs/2 {
							sumqx[0] += px
							sumqx[1] += px
							sumqx[2] += mx
							sumqx[3] += mx
							sumq2[0] += pp
							sumq2[1] += pp
							sumq2[2] += mm
							sumq2[3] += mm
						} else {
							sumqx[0] += px
							sumqx[2] += px
							sumqx[1] += mx
							sumqx[3] += mx
							sumq2[0] += pp
							sumq2[2] += pp
							sumq2[1] += mm
							sumq2[3] += mm
						}
					}
					for k := 0; k < 4; k++ {
						if sumq2[k] > 0 && float32(sumqx[k]*sumqx[k]) > float32(bestScore*sumq2[k]) {
							scale = sumqx[k] / sumq2[k]
							bestScore = scale * sumqx[k]
							besti1, besti2, bestK = i1, i2, k
						}
					}
				}
			}
			if besti1 < 0 || besti2 < 0 || bestK < 0 {
				scales[ib], shifts[ib] = 0, 0
				continue
			}
			for j := 0; j < bs; j++ {
				switch {
				case j < besti1:
					L[idx[j]] = 0
				case j < besti2:
					L[idx[j]] = 1
				default:
					L[idx[j]] = 2
				}
			}
			if scale < 0 {
				for j := range L {
					L[j] = 2 - L[j]
				}
				scale = -scale
				bestK = 3 - bestK
			}
			k4 := bestK
			xgOf := func(k int) *[3]float32 { return iq1MXX(k4, k) }
			if !lat.iq1Snap(xb, weight[:], scale, L[:], index[:], xgOf) {
				scale = lat.iq1Refit(xb, weight[:], index[:], xgOf, scale)
			}
			qs[2*ib] = uint8(index[0])
			qs[2*ib+1] = uint8(index[1])
			qh[ib] = uint8(index[0]>>8) | uint8(index[1]>>8)<<4
			scales[ib], shifts[ib] = scale, bestK
			maxScale = maxC(maxScale, scale)
		}
		if maxScale == 0 {
			continue
		}
		d := maxScale / 15
		id := 1 / d
		var sw [4]uint16
		var sumqx, sumq2 float32
		for ib := 0; ib < QK_K/bs; ib++ {
			l := clampInt(nearestInt(float32(0.5*(float32(id*scales[ib])-1))), 0, 7)
			sw[ib/4] |= uint16(l) << (3 * (ib % 4))
			qh[ib] |= masks[shifts[ib]]
			xb := xbl[bs*ib : bs*ib+bs]
			var qwb []float32
			if qw != nil {
				qwb = qw[QK_K*ibl+bs*ib:]
			}
			iq1Weights(xb, qwb, sigma2, weight[:])
			for k := 0; k < 2; k++ {
				xx := iq1MXX(shifts[ib], k)
				g := int(qs[2*ib+k]) | (int(qh[ib])<<(8-4*k))&0x700
				pg := &lat.grid[g]
				for j := 0; j < 8; j++ {
					w := weight[8*k+j]
					q := xx[(pg[j]-1)/2] * float32(2*l+1)
					sumqx += float32(float32(w*q) * xb[8*k+j])
					sumq2 += float32(float32(w*q) * q)
				}
			}
		}
		if sumq2 > 0 {
			d = sumqx / sumq2
		}
		s := FP32ToFP16(d * 1.1125)
		sw[0] |= (s & 0x000f) << 12
		sw[1] |= (s & 0x00f0) << 8
		sw[2] |= (s & 0x0f00) << 4
		sw[3] |= s & 0xf000
		for i, v := range sw {
			binary.LittleEndian.PutUint16(sc[2*i:], v)
		}
	}
}
