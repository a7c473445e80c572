package ops

import "math"

// RMSNorm writes x / sqrt(mean(x²) + eps) * w for each row of len(w)
// elements of x into dst (which may be x). The sum of squares is kept in
// float64 and the scale computed in float32, as ggml_rms_norm; w nil means
// no weight.
func RMSNorm(dst, x, w []float32, n int, eps float32) {
	for r := 0; r+n <= len(x); r += n {
		xr, yr := x[r:r+n], dst[r:r+n]
		var sum float64
		for _, v := range xr {
			sum += float64(v * v)
		}
		mean := float32(sum / float64(n))
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		for i, v := range xr {
			y := v * scale
			if w != nil {
				y *= w[i]
			}
			yr[i] = y
		}
	}
}

// L2Norm scales each row of n elements of x in place to unit length, as
// ggml_l2_norm: x / max(sqrt(sum x²), eps) with the sum in float64.
func L2Norm(x []float32, n int, eps float32) {
	for r := 0; r+n <= len(x); r += n {
		xr := x[r : r+n]
		var sum float64
		for _, v := range xr {
			sum += float64(v * v)
		}
		scale := 1 / max(float32(math.Sqrt(float64(float32(sum)))), eps)
		for i := range xr {
			xr[i] *= scale
		}
	}
}

// Softmax writes softmax(src) into dst (which may be src), as ggml_soft_max
// without mask or scale: exponentials in float32 (see expSum), their sum in
// float64, then a float32 scale by the reciprocal.
func Softmax(dst, src []float32) {
	m := float32(math.Inf(-1))
	for _, x := range src {
		m = max(m, x)
	}
	sum := expSum(dst, src, m)
	inv := float32(1 / sum)
	for i := range src {
		dst[i] *= inv
	}
}

// Exp is the C library's expf (see Expf).
func Exp(x float32) float32 { return Expf(x) }

// Sigmoid is ggml's 1/(1+expf(-x)).
func Sigmoid(x float32) float32 { return 1 / (1 + Exp(-x)) }

// SiLU is ggml's x/(1+expf(-x)).
func SiLU(x float32) float32 { return x / (1 + Exp(-x)) }

// Softplus is ggml's log(1+expf(x)), the identity above 20.
func Softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return Logf(1 + Exp(x))
}

// Tanh is the C library's tanhf (see Tanhf).
func Tanh(x float32) float32 { return Tanhf(x) }

// SiTU writes Kimi K3's activation into gate:
// beta·tanh(gate/beta)·sigmoid(gate) · lb·tanh(up/lb), the up-branch
// transform dropped when lb <= 0. The float32 steps follow the ggml graph
// (scale, tanh, scale, mul by sigmoid, mul).
func SiTU(gate, up []float32, beta, lb float32) {
	ib, il := 1/beta, 1/lb // the same division once per call, not per element
	up = up[:len(gate)]
	// Chunks of arguments through tanhfSlice and sigmoidSlice, which may do
	// eight at a time.
	const chunk = 256
	var arg, tg, tu, sg [chunk]float32
	for off := 0; off < len(gate); off += chunk {
		g := gate[off:min(off+chunk, len(gate))]
		u := up[off : off+len(g)]
		for i, v := range g {
			arg[i] = v * ib
		}
		tanhfSlice(tg[:len(g)], arg[:len(g)])
		sigmoidSlice(sg[:len(g)], g)
		if lb > 0 {
			for i, v := range u {
				arg[i] = v * il
			}
			tanhfSlice(tu[:len(g)], arg[:len(g)])
			for i := range g {
				tu[i] *= lb
			}
		} else {
			copy(tu[:], u)
		}
		for i := range g {
			a := tg[i] * beta
			a *= sg[i]
			g[i] = a * tu[i]
		}
	}
}

// Add adds src to dst element-wise.
func Add(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}
