package quant

import "math"

// Helpers shared by the K-quant reference quantizers (ggml-quants.c:
// make_qx_quants, make_q3_quants, make_qkx2_quants, get_scale_min_k4).
//
// Bit-identity with ggml needs every float operation done in float32, in C's
// order, each rounded on its own. Products that feed an addition or
// subtraction are wrapped in float32(...): the Go spec lets the compiler fuse
// x*y+z into one FMA (gc does on GOAMD64=v3), and an explicit conversion is
// the documented way to forbid it. ggml's baseline x64 build has no FMA.
// That includes products passed to nearestInt, whose +12582912 would
// otherwise fuse with them once inlined.

// groupMaxEps is ggml's GROUP_MAX_EPS: below it a group counts as all zero.
const groupMaxEps = float32(1e-15)

// sqrt32 is C's sqrtf. Rounding the float64 root to float32 is correctly
// rounded because float64 has more than twice float32's precision.
func sqrt32(f float32) float32 { return float32(math.Sqrt(float64(f))) }

// makeQxQuants is make_qx_quants with rmse_type 1 and no importance weights,
// the only form a reference quantizer uses (Q6_K). It fills L with
// quants in [0, 2*nmax) and returns the scale; the weight of x[i] is x[i]^2.
func makeQxQuants(nmax int, x []float32, L []int8) float32 {
	var max, amax float32
	for _, v := range x {
		if ax := abs32(v); ax > amax {
			amax, max = ax, v
		}
	}
	if amax < groupMaxEps {
		for i := range x {
			L[i] = 0
		}
		return 0
	}
	fnmax := float32(nmax)
	iscale := -fnmax / max
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampInt(nearestInt(float32(iscale*v)), -nmax, nmax-1)
		L[i] = int8(l + nmax)
		w := v * v
		fl := float32(l)
		sumlx += float32(float32(w*v) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fnmax + float32(float32(0.1)*float32(is))) / max
		sumlx, suml2 = 0, 0
		for _, v := range x {
			fl := float32(clampInt(nearestInt(float32(iscale*v)), -nmax, nmax-1))
			w := v * v
			sumlx += float32(float32(w*v) * fl)
			suml2 += float32(float32(w*fl) * fl)
		}
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			for i, v := range x {
				L[i] = int8(nmax + clampInt(nearestInt(float32(iscale*v)), -nmax, nmax-1))
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// makeQ3Quants is make_q3_quants with do_rmse set (Q3_K's reference): a
// symmetric first guess, then up to five passes that move single quants
// while that improves the weighted least-squares fit.
func makeQ3Quants(nmax int, x []float32, L []int8) float32 {
	var max, amax float32
	for _, v := range x {
		if ax := abs32(v); ax > amax {
			amax, max = ax, v
		}
	}
	if amax < groupMaxEps {
		for i := range x {
			L[i] = 0
		}
		return 0
	}
	iscale := -float32(nmax) / max
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampInt(nearestInt(float32(iscale*v)), -nmax, nmax-1)
		L[i] = int8(l)
		w := v * v
		fl := float32(l)
		sumlx += float32(float32(w*v) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	for itry := 0; itry < 5; itry++ {
		changed := 0
		for i, v := range x {
			w := v * v
			li := float32(L[i])
			slx := sumlx - float32(float32(w*v)*li)
			if !(slx > 0) {
				continue
			}
			sl2 := suml2 - float32(float32(w*li)*li)
			newL := clampInt(nearestInt(float32(v*sl2)/slx), -nmax, nmax-1)
			if newL == int(L[i]) {
				continue
			}
			fn := float32(newL)
			slx += float32(float32(w*v) * fn)
			sl2 += float32(float32(w*fn) * fn)
			if sl2 > 0 && float32(float32(slx*slx)*suml2) > float32(float32(sumlx*sumlx)*sl2) {
				L[i] = int8(newL)
				sumlx, suml2 = slx, sl2
				changed++
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range x {
		L[i] += int8(nmax)
	}
	if suml2 > 0 {
		return sumlx / suml2
	}
	return 0
}

// qkx2Params are make_qkx2_quants' search parameters, fixed per type.
type qkx2Params struct {
	nmax         int
	rmin, rdelta float32
	nstep        int
	useMAD       bool // absolute instead of squared error
}

// makeQkx2Quants is make_qkx2_quants: fit x ≈ scale*L - min with L in
// [0, nmax] by trying nstep+1 candidate inverse scales and keeping the one
// with the lowest weighted error. It returns scale and the (non-negative)
// min; laux is scratch of len(x).
func makeQkx2Quants(p qkx2Params, x, weights []float32, L, laux []uint8) (scale, theMin float32) {
	min, max := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < len(x); i++ {
		if x[i] < min {
			min = x[i]
		}
		if x[i] > max {
			max = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if min > 0 {
		min = 0
	}
	if max == min {
		for i := range x {
			L[i] = 0
		}
		return 0, -min
	}
	nmax := float32(p.nmax)
	iscale := nmax / (max - min)
	scale = 1 / iscale
	var bestErr float32
	for i, v := range x {
		L[i] = uint8(clampInt(nearestInt(float32(iscale*(v-min))), 0, p.nmax))
		diff := float32(float32(scale*float32(L[i]))+min) - v
		bestErr += float32(weights[i] * errTerm(diff, p.useMAD))
	}
	if p.nstep < 1 {
		return scale, -min
	}
	for is := 0; is <= p.nstep; is++ {
		iscale = float32(float32(p.rmin+float32(p.rdelta*float32(is)))+nmax) / (max - min)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			l := clampInt(nearestInt(float32(iscale*(v-min))), 0, p.nmax)
			laux[i] = uint8(l)
			wl := float32(weights[i] * float32(l))
			sumL += wl
			sumL2 += float32(wl * float32(l))
			sumXL += float32(wl * v)
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if !(D > 0) {
			continue
		}
		thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
		thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
		if thisMin > 0 {
			thisMin = 0
			thisScale = sumXL / sumL2
		}
		var curErr float32
		for i, v := range x {
			diff := float32(float32(thisScale*float32(laux[i]))+thisMin) - v
			curErr += float32(weights[i] * errTerm(diff, p.useMAD))
		}
		if curErr < bestErr {
			copy(L, laux[:len(x)])
			bestErr, scale, min = curErr, thisScale, thisMin
		}
	}
	return scale, -min
}

func errTerm(diff float32, mad bool) float32 {
	if mad {
		return abs32(diff)
	}
	return diff * diff
}

func clampInt(v, lo, hi int) int {
	if v > hi {
		v = hi
	}
	if v < lo {
		v = lo
	}
	return v
}

// scaleMinK4 is get_scale_min_k4: the 6-bit scale and min of sub-block j
// from the 12-byte packed table of Q4_K and Q5_K.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return (q[j+4] & 0xF) | ((q[j-4] >> 6) << 4), (q[j+4] >> 4) | ((q[j] >> 6) << 4)
}

// putScaleMinK4 packs the eight 6-bit scales and mins of a Q4_K/Q5_K block
// into its 12-byte table, the inverse of scaleMinK4.
func putScaleMinK4(q []byte, ls, lm *[8]uint8) {
	for j := 0; j < 8; j++ {
		if j < 4 {
			q[j] = ls[j]
			q[j+4] = lm[j]
		} else {
			q[j+4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4)
			q[j-4] |= (ls[j] >> 4) << 6
			q[j] |= (lm[j] >> 4) << 6
		}
	}
}
