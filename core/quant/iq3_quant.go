package quant

import "encoding/binary"

// Reference quantizers of the 3-bit grid types (ggml-quants.c:
// quantize_row_iq3_xxs_impl, quantize_row_iq3_s_impl), with or without
// importance weights. Float operations follow C's order and rounding.

func init() {
	impls[IQ3_XXS].quantizeImatrix = quantizeIQ3XXS
	impls[IQ3_XXS].quantize = func(src []float32, dst []byte) { quantizeIQ3XXS(src, dst, nil) }
	impls[IQ3_S].quantizeImatrix = quantizeIQ3S
	impls[IQ3_S].quantize = func(src []float32, dst []byte) { quantizeIQ3S(src, dst, nil) }
}

// groupMaxEpsIQ3XXS is GROUP_MAX_EPS_IQ3_XXS.
const groupMaxEpsIQ3XXS = float32(1e-8)

// iq3Weights fills weight and waux for the 32 weights xb: qw*sqrt(sigma2 +
// x^2) with importance weights, x^2 without.
func iq3Weights(xb, qw []float32, sigma2 float32, weight, waux []float32) {
	if qw != nil {
		iqImportance(xb, qw, sigma2, weight, waux)
		return
	}
	for i, v := range xb {
		weight[i] = v * v
	}
	for i := range xb {
		waux[i] = sqrt32(weight[i])
	}
}

// iq3Search is the scale search of the IQ3 quantizers on 32 weights (8 grid
// points of 4): candidate inverse scales (15 + 0.2*is)/max for is in
// [-isMax, isMax], each snapped to the grid, then a refit of the points off
// the grid (IQ3_S: of all points, and it starts with none counted on the
// grid). It returns the scale and leaves the codes in L.
func iq3Search(lat *iqLattice, xval, weight, waux []float32, L, Laux []int8, max float32, isMax int, iq3s bool) float32 {
	const kMaxQ = 8
	clear(L[:32]) // kept when no candidate fits (all weights zero)
	var best float32
	scale := max / (2*kMaxQ - 1)
	var onGrid [8]bool
	for k := range onGrid {
		onGrid[k] = !iq3s
	}
	for is := -isMax; is <= isMax; is++ {
		id := float32(2*kMaxQ-1+float32(float32(is)*0.2)) / max
		thisScale := 1 / id
		var onGridAux [8]bool
		for k := 0; k < 8; k++ {
			for i := 0; i < 4; i++ {
				Laux[4*k+i] = int8(clampInt(nearestInt(float32(0.5*(float32(id*xval[4*k+i])-1))), 0, kMaxQ-1))
			}
			u := lat.code(Laux[4*k:])
			onGridAux[k] = lat.gridMap[u] >= 0
			if !onGridAux[k] {
				lat.bestNeighbour(u, xval[4*k:4*k+4], waux[4*k:4*k+4], thisScale, Laux[4*k:4*k+4])
			}
		}
		sumqx, sumq2 := iqFit(weight, xval[:32], Laux[:32])
		if sumq2 > 0 && float32(sumqx*sumqx) > float32(best*sumq2) {
			scale = sumqx / sumq2
			best = scale * sumqx
			copy(L[:32], Laux[:32])
			onGrid = onGridAux
		}
	}
	off := false
	for _, g := range onGrid {
		off = off || !g
	}
	if off && scale > 0 {
		id := 1 / scale
		for k := 0; k < 8; k++ {
			if onGrid[k] && !iq3s {
				continue
			}
			g := lat.snap(xval[4*k:4*k+4], waux[4*k:4*k+4], id, scale, kMaxQ, L[4*k:4*k+4])
			for i := 0; i < 4; i++ {
				L[4*k+i] = (lat.grid[g][i] - 1) / 2
			}
		}
		if sumqx, sumq2 := iqFit(weight, xval[:32], L[:32]); sumq2 > 0 {
			scale = sumqx / sumq2
		}
	}
	return scale
}

// iq3Sigma2 is the IQ3 (and IQ2_S) importance sigma2: 2*sum(x^2)/256.
func iq3Sigma2(xbl []float32) float32 {
	var sumx2 float32
	for _, v := range xbl {
		sumx2 += float32(v * v)
	}
	return 2 * sumx2 / QK_K
}

// quantizeIQ3XXS is quantize_row_iq3_xxs_impl(256, ...).
func quantizeIQ3XXS(src []float32, dst []byte, qw []float32) {
	lat := iq3XXSLattice.get()
	var (
		scales       [8]float32
		weight, waux [32]float32
		xval         [32]float32
		L, Laux      [32]int8
		signs        [4]uint8
		q3           [96]byte // grid indices, then 8 uint32 scales and signs
	)
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		blk := dst[ibl*iq3XXSBytes : (ibl+1)*iq3XXSBytes]
		putF16(blk, 0)
		clear(q3[:])
		xbl := src[QK_K*ibl : QK_K*(ibl+1)]
		sigma2 := iq3Sigma2(xbl)
		var maxScale float32
		for ib := 0; ib < QK_K/32; ib++ {
			xb := xbl[32*ib : 32*ib+32]
			var qwb []float32
			if qw != nil {
				qwb = qw[QK_K*ibl+32*ib:]
			}
			iq3Weights(xb, qwb, sigma2, weight[:], waux[:])
			iqSignedGroups(xb, weight[:], xval[:], signs[:])
			max := xval[0]
			for _, v := range xval[1:] {
				max = maxC(max, v)
			}
			if max < groupMaxEpsIQ3XXS {
				scales[ib] = 0
				continue
			}
			scale := iq3Search(lat, xval[:], weight[:], waux[:], L[:], Laux[:], max, 15, false)
			if scale < 0 {
				scale = -scale
				for k := range signs {
					signs[k] = ^signs[k] & 127
				}
			}
			for k := 0; k < 8; k++ {
				q3[8*ib+k] = uint8(lat.gridMap[lat.code(L[4*k:])])
			}
			ss := uint32(signs[0]) | uint32(signs[1])<<7 | uint32(signs[2])<<14 | uint32(signs[3])<<21
			binary.LittleEndian.PutUint32(q3[64+4*ib:], ss)
			scales[ib] = scale
			maxScale = maxC(maxScale, scale)
		}
		if maxScale == 0 {
			clear(blk[2:])
			continue
		}
		d := maxScale / 31
		putF16(blk, d*1.0125)
		id := 1 / d
		for ib := 0; ib < QK_K/32; ib++ {
			l := clampInt(nearestInt(float32(0.5*(float32(id*scales[ib])-1))), 0, 15)
			ss := binary.LittleEndian.Uint32(q3[64+4*ib:])
			binary.LittleEndian.PutUint32(q3[64+4*ib:], ss|uint32(l)<<28)
		}
		copy(blk[2:], q3[:])
	}
}

// quantizeIQ3S is quantize_iq3_s (blocks of 32).
func quantizeIQ3S(src []float32, dst []byte, qw []float32) {
	lat := iq3SLattice.get()
	var (
		scales       [8]float32
		weight, waux [32]float32
		xval         [32]float32
		L, Laux      [32]int8
		signs        [4]uint8
	)
	for ibl := 0; ibl < len(src)/QK_K; ibl++ {
		blk := dst[ibl*iq3SBytes : (ibl+1)*iq3SBytes]
		clear(blk)
		qs, qh, sgn, sc := blk[2:66], blk[66:74], blk[74:106], blk[106:110]
		xbl := src[QK_K*ibl : QK_K*(ibl+1)]
		sigma2 := iq3Sigma2(xbl)
		var maxScale float32
		// ggml advances its qs and signs pointers only past groups it
		// stores, so a group left out (all zero) shifts the later ones
		// down and leaves the last slots zero; qh is indexed by group.
		next := 0
		for ib := 0; ib < QK_K/32; ib++ {
			xb := xbl[32*ib : 32*ib+32]
			var qwb []float32
			if qw != nil {
				qwb = qw[QK_K*ibl+32*ib:]
			}
			iq3Weights(xb, qwb, sigma2, weight[:], waux[:])
			for k := 0; k < 4; k++ {
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
			max := xval[0]
			for _, v := range xval[1:] {
				max = maxC(max, v)
			}
			if max == 0 {
				scales[ib] = 0
				continue
			}
			scale := iq3Search(lat, xval[:], weight[:], waux[:], L[:], Laux[:], max, 9, true)
			if scale < 0 {
				scale = -scale
				for k := range signs {
					signs[k] = ^signs[k]
				}
			}
			for k := 0; k < 8; k++ {
				g := int(lat.gridMap[lat.code(L[4*k:])])
				qs[8*next+k] = uint8(g)
				qh[ib] |= uint8(g>>8) << k
			}
			copy(sgn[4*next:4*next+4], signs[:])
			next++
			scales[ib] = scale
			maxScale = maxC(maxScale, scale)
		}
		if maxScale == 0 {
			continue
		}
		d := maxScale / 31
		putF16(blk, d*1.033)
		id := 1 / d
		for ib := 0; ib < QK_K/32; ib += 2 {
			l1 := clampInt(nearestInt(float32(0.5*(float32(id*scales[ib])-1))), 0, 15)
			l2 := clampInt(nearestInt(float32(0.5*(float32(id*scales[ib+1])-1))), 0, 15)
			sc[ib/2] = uint8(l1 | l2<<4)
		}
	}
}
