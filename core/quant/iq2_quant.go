package quant

import "encoding/binary"

// Reference quantizers of the 2-bit grid types (ggml-quants.c:
// quantize_row_iq2_xxs_impl, quantize_row_iq2_xs_impl,
// quantize_row_iq2_s_impl), one row at a time as ggml_quantize_chunk calls
// them. Float operations follow C's order and rounding (see k_common.go).

func init() {
	impls[IQ2_XXS].quantizeImatrix = quantizeIQ2XXS
	impls[IQ2_XS].quantizeImatrix = quantizeIQ2XS
	impls[IQ2_S].quantizeImatrix = quantizeIQ2S
	impls[IQ2_S].quantize = func(src []float32, dst []byte) { quantizeIQ2S(src, dst, nil) }
}

// groupMaxEpsIQ2S is GROUP_MAX_EPS_IQ2_S.
const groupMaxEpsIQ2S = float32(1e-8)

// iqSignedGroups makes the magnitudes xval of the 32 (or 16) weights xb and
// ggml's sign bytes per 8: an even number of flips per group, flipping back
// the least important weight when the count is odd.
func iqSignedGroups(xb, weight, xval []float32, signs []uint8) {
	for k := 0; k < len(xb)/8; k++ {
		nflip := 0
		var s uint8
		for i := 0; i < 8; i++ {
			if v := xb[8*k+i]; v >= 0 {
				xval[8*k+i] = v
			} else {
				xval[8*k+i] = -v
				nflip++
				s |= 1 << i
			}
		}
		if nflip%2 != 0 {
			imin := 0
			min := float32(float32(weight[8*k]*xb[8*k]) * xb[8*k])
			for i := 1; i < 8; i++ {
				ax := float32(float32(weight[8*k+i]*xb[8*k+i]) * xb[8*k+i])
				if ax < min {
					min, imin = ax, i
				}
			}
			xval[8*k+imin] = -xval[8*k+imin]
			s ^= 1 << imin
		}
		signs[k] = s & 127
	}
}

// iq2Code returns the lattice index of the codes L[0:8].
func iq2Code(L []int8) int {
	u := 0
	for i := 0; i < 8; i++ {
		u |= int(L[i]) << (2 * i)
	}
	return u
}

// code returns the lattice index of the codes L[0:dim].
func (lat *iqLattice) code(L []int8) int {
	u := 0
	for i := 0; i < lat.dim; i++ {
		u |= int(L[i]) << (lat.bits * i)
	}
	return u
}

// snap quantizes the dim magnitudes xval at inverse scale id to lattice
// codes in [0, kMaxQ-1], moving an off-grid point to its best neighbour at
// scale; it writes the codes to L and returns the grid index.
func (lat *iqLattice) snap(xval, waux []float32, id, scale float32, kMaxQ int, L []int8) int {
	for i := 0; i < lat.dim; i++ {
		L[i] = int8(clampInt(nearestInt(float32(0.5*(float32(id*xval[i])-1))), 0, kMaxQ-1))
	}
	u := lat.code(L)
	if g := lat.gridMap[u]; g >= 0 {
		return int(g)
	}
	return lat.bestNeighbour(u, xval, waux, scale, L)
}

// iqFit returns sum w*x*q and sum w*q*q for codes L (q = 2L+1).
func iqFit(weight, xval []float32, L []int8) (sumqx, sumq2 float32) {
	for i := range xval {
		w := weight[i]
		q := float32(2*int(L[i]) + 1)
		sumqx += float32(float32(w*xval[i]) * q)
		sumq2 += float32(float32(w*q) * q)
	}
	return sumqx, sumq2
}

// iq2GroupScale is the scale search every 2-bit grid quantizer runs on one
// group of weights (32 for IQ2_XXS, 16 for IQ2_XS/IQ2_S): an initial
// make_qp_quants fit, 13 candidate inverse scales snapped to the grid, and
// a final refit. It returns the scale and leaves the grid codes in L; signs
// are flipped when the scale comes out negative. ok is false for a group
// ggml leaves empty (all zero, or no positive first fit).
func iq2GroupScale(lat *iqLattice, xval, weight, waux []float32, L, Laux []int8, signs []uint8) (scale float32, ok bool) {
	const kMaxQ = 3
	n := len(xval)
	max := xval[0]
	for _, v := range xval[1:] {
		max = maxC(max, v)
	}
	if max < groupMaxEps {
		return 0, false
	}
	var lq [32]uint8
	scale = makeQpQuants(kMaxQ+1, xval, lq[:n], weight)
	for i := 0; i < n; i++ {
		L[i] = int8(lq[i])
	}
	effMax := scale * kMaxQ
	if effMax <= 0 {
		return 0, false
	}
	var best float32
	for is := -6; is <= 6; is++ {
		id := float32(2*kMaxQ-1+float32(float32(is)*0.1)) / effMax
		thisScale := 1 / id
		for k := 0; k < n/8; k++ {
			lat.snap(xval[8*k:8*k+8], waux[8*k:8*k+8], id, thisScale, kMaxQ, Laux[8*k:8*k+8])
		}
		sumqx, sumq2 := iqFit(weight, xval, Laux[:n])
		if sumq2 > 0 && float32(sumqx*sumqx) > float32(best*sumq2) {
			scale = sumqx / sumq2
			best = scale * sumqx
			copy(L[:n], Laux[:n])
		}
	}
	if scale > 0 {
		id := 1 / scale
		for k := 0; k < n/8; k++ {
			g := lat.snap(xval[8*k:8*k+8], waux[8*k:8*k+8], id, scale, kMaxQ, L[8*k:8*k+8])
			for i := 0; i < 8; i++ {
				L[8*k+i] = (lat.grid[g][i] - 1) / 2
			}
		}
		if sumqx, sumq2 := iqFit(weight, xval, L[:n]); sumq2 > 0 {
			scale = sumqx / sumq2
		}
	}
	if scale < 0 {
		// ggml: "should never happen"; flip the scale and the signs.
		scale = -scale
		for k := range signs {
			signs[k] = ^signs[k] & 127
		}
	}
	return scale, true
}

// iqImportance fills weight[i] = qw[i]*sqrt(sigma2 + x[i]^2) and waux =
// sqrt(weight).
func iqImportance(xb, qw []float32, sigma2 float32, weight, waux []float32) {
	for i, v := range xb {
		weight[i] = qw[i] * sqrt32(sigma2+float32(v*v))
	}
	for i := range xb {
		waux[i] = sqrt32(weight[i])
	}
}

// quantizeIQ2XXS is quantize_row_iq2_xxs_impl (qw is required).
func quantizeIQ2XXS(src []float32, dst []byte, qw []float32) {
	lat := iq2XXSLattice.get()
	var (
		scales       [8]float32
		weight, waux [32]float32
		xval         [32]float32
		L, Laux      [32]int8
		signs        [4]uint8
		q2           [16]uint32
	)
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		blk := dst[ibl*iq2XXSBytes : (ibl+1)*iq2XXSBytes]
		putF16(blk, 0)
		clear(q2[:])
		xbl := src[QK_K*ibl : QK_K*(ibl+1)]
		sigma2 := iqSigma2(xbl)
		var maxScale float32
		for ib := 0; ib < QK_K/32; ib++ {
			xb := xbl[32*ib : 32*ib+32]
			iqImportance(xb, qw[QK_K*ibl+32*ib:], sigma2, weight[:], waux[:])
			iqSignedGroups(xb, weight[:], xval[:], signs[:])
			scale, ok := iq2GroupScale(lat, xval[:], weight[:], waux[:], L[:], Laux[:], signs[:])
			if !ok {
				scales[ib] = 0
				continue
			}
			for k := 0; k < 4; k++ {
				g := lat.gridMap[iq2Code(L[8*k:])]
				q2[2*ib] |= uint32(g) << (8 * k)
				q2[2*ib+1] |= uint32(signs[k]) << (7 * k)
			}
			scales[ib] = scale
			maxScale = maxC(maxScale, scale)
		}
		qs := blk[2:]
		if maxScale == 0 {
			clear(qs)
			continue
		}
		d := maxScale / 31
		putF16(blk, d)
		id := 1 / d
		for ib := 0; ib < QK_K/32; ib++ {
			l := clampInt(nearestInt(float32(0.5*(float32(id*scales[ib])-1))), 0, 15)
			q2[2*ib+1] |= uint32(l) << 28
		}
		for i, v := range q2 {
			binary.LittleEndian.PutUint32(qs[4*i:], v)
		}
	}
}

// iq2Search16 is the scale search of IQ2_XS and IQ2_S on 16 weights: 19
// candidate inverse scales around max/5, each snapped to the grid, then a
// refit of the groups that were off the grid. It returns the scale and
// leaves the grid codes in L; ok is false for a group below eps.
func iq2Search16(lat *iqLattice, xval, weight, waux []float32, L, Laux []int8, eps float32) (scale float32, ok bool) {
	const kMaxQ = 3
	max := xval[0]
	for _, v := range xval[1:16] {
		max = maxC(max, v)
	}
	clear(L[:16])
	if max < eps {
		return 0, false
	}
	var best float32
	scale = max / (2*kMaxQ - 1)
	onGrid := [2]bool{true, true}
	for is := -9; is <= 9; is++ {
		id := float32(2*kMaxQ-1+float32(float32(is)*0.1)) / max
		thisScale := 1 / id
		var onGridAux [2]bool
		for k := 0; k < 2; k++ {
			for i := 0; i < 8; i++ {
				Laux[8*k+i] = int8(clampInt(nearestInt(float32(0.5*(float32(id*xval[8*k+i])-1))), 0, kMaxQ-1))
			}
			u := iq2Code(Laux[8*k:])
			onGridAux[k] = lat.gridMap[u] >= 0
			if !onGridAux[k] {
				lat.bestNeighbour(u, xval[8*k:8*k+8], waux[8*k:8*k+8], thisScale, Laux[8*k:8*k+8])
			}
		}
		sumqx, sumq2 := iqFit(weight, xval[:16], Laux[:16])
		if sumq2 > 0 && float32(sumqx*sumqx) > float32(best*sumq2) {
			scale = sumqx / sumq2
			best = scale * sumqx
			copy(L[:16], Laux[:16])
			onGrid = onGridAux
		}
	}
	if (!onGrid[0] || !onGrid[1]) && scale > 0 {
		id := 1 / scale
		for k := 0; k < 2; k++ {
			if onGrid[k] {
				continue
			}
			lat.snap(xval[8*k:8*k+8], waux[8*k:8*k+8], id, scale, kMaxQ, L[8*k:8*k+8])
		}
		if sumqx, sumq2 := iqFit(weight, xval[:16], L[:16]); sumq2 > 0 {
			scale = sumqx / sumq2
		}
	}
	return scale, true
}

// iq2PackScales stores the 4-bit scales of 16 groups of 16 (two per byte)
// against the super-block scale d = maxScale/31, as IQ2_XS and IQ2_S do.
func iq2PackScales(dst []byte, scales *[16]float32, d float32) {
	id := 1 / d
	for ib := 0; ib < 16; ib++ {
		l := clampInt(nearestInt(float32(0.5*(float32(id*scales[ib])-1))), 0, 15)
		if ib%2 == 0 {
			dst[ib/2] = uint8(l)
		} else {
			dst[ib/2] |= uint8(l) << 4
		}
	}
}

// quantizeIQ2XS is quantize_row_iq2_xs_impl (qw is required).
func quantizeIQ2XS(src []float32, dst []byte, qw []float32) {
	lat := iq2XSLattice.get()
	var (
		scales       [16]float32
		weight, waux [16]float32
		xval         [16]float32
		L, Laux      [16]int8
		signs        [2]uint8
		q2           [32]uint16
	)
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		blk := dst[ibl*iq2XSBytes : (ibl+1)*iq2XSBytes]
		putF16(blk, 0)
		clear(q2[:])
		clear(blk[66:74])
		xbl := src[QK_K*ibl : QK_K*(ibl+1)]
		sigma2 := iqSigma2(xbl)
		var maxScale float32
		for ib := 0; ib < QK_K/16; ib++ {
			xb := xbl[16*ib : 16*ib+16]
			iqImportance(xb, qw[QK_K*ibl+16*ib:], sigma2, weight[:], waux[:])
			iqSignedGroups(xb, weight[:], xval[:], signs[:])
			scale, ok := iq2Search16(lat, xval[:], weight[:], waux[:], L[:], Laux[:], groupMaxEps)
			if !ok {
				scales[ib] = 0
				continue
			}
			if scale < 0 {
				scale = -scale
				for k := range signs {
					signs[k] = ^signs[k] & 127
				}
			}
			for k := 0; k < 2; k++ {
				q2[2*ib+k] = uint16(lat.gridMap[iq2Code(L[8*k:])]) | uint16(signs[k])<<9
			}
			scales[ib] = scale
			maxScale = maxC(maxScale, scale)
		}
		if maxScale == 0 {
			clear(blk[2:66])
			continue
		}
		d := maxScale / 31
		putF16(blk, d)
		iq2PackScales(blk[66:74], &scales, d)
		for i, v := range q2 {
			binary.LittleEndian.PutUint16(blk[2+2*i:], v)
		}
	}
}

// quantizeIQ2S is quantize_row_iq2_s_impl; without qw it weighs each
// weight by sigma2/4 + x^2.
func quantizeIQ2S(src []float32, dst []byte, qw []float32) {
	lat := iq2SLattice.get()
	var (
		scales       [16]float32
		weight, waux [16]float32
		xval         [16]float32
		L, Laux      [16]int8
		signs        [2]uint8
	)
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		blk := dst[ibl*iq2SBytes : (ibl+1)*iq2SBytes]
		clear(blk)
		xbl := src[QK_K*ibl : QK_K*(ibl+1)]
		var sumx2 float32
		for _, v := range xbl {
			sumx2 += float32(v * v)
		}
		sigma2 := 2 * sumx2 / QK_K
		var maxScale float32
		for ib := 0; ib < QK_K/16; ib++ {
			xb := xbl[16*ib : 16*ib+16]
			if qw != nil {
				for i, v := range xb {
					weight[i] = qw[QK_K*ibl+16*ib+i] * sqrt32(sigma2+float32(v*v))
				}
			} else {
				for i, v := range xb {
					weight[i] = float32(0.25*sigma2) + float32(v*v)
				}
			}
			for i := range xb {
				waux[i] = sqrt32(weight[i])
			}
			for k := 0; k < 2; k++ {
				var s uint8
				for i := 0; i < 8; i++ {
					if v := xb[8*k+i]; v >= 0 {
						xval[8*k+i] = v
					} else {
						xval[8*k+i] = -v
						s |= 1 << i
					}
				}
				signs[k] = s
			}
			scale, ok := iq2Search16(lat, xval[:], weight[:], waux[:], L[:], Laux[:], groupMaxEpsIQ2S)
			if !ok {
				scales[ib] = 0
				continue
			}
			if scale < 0 {
				scale = -scale
				signs[0], signs[1] = ^signs[0], ^signs[1]
			}
			for k := 0; k < 2; k++ {
				g := int(lat.gridMap[iq2Code(L[8*k:])])
				i8 := 2*ib + k
				blk[2+i8] = uint8(g)
				blk[66+i8/4] |= uint8(g>>8) << (2 * (i8 % 4))
				blk[34+i8] = signs[k]
			}
			scales[ib] = scale
			maxScale = maxC(maxScale, scale)
		}
		if maxScale == 0 {
			continue
		}
		d := maxScale / 31
		putF16(blk, d*0.9875)
		iq2PackScales(blk[74:82], &scales, d)
	}
}
