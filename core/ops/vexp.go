package ops

import "math"

// ggml computes some exponentials four lanes at a time with its own
// polynomial (ggml_v_expf, from ARM's optimized routines) instead of
// expf: in SiLU and in softmax, for every group of four elements, the
// remainder going through expf. The scalar ("generic") CPU build does this
// with SSE2 and no FMA, so each multiply and add rounds on its own. vexp is
// one lane of that; it agrees with expf to about 1.5 ulp, and reproducing
// it is what makes k3 bit-exact with that build.

func f32bits(f float32) uint32 { return math.Float32bits(f) }
func f32from(u uint32) float32 { return math.Float32frombits(u) }

// vexp is one lane of ggml_v_expf (SSE2, without FMA). The explicit
// float32 conversions keep each product rounded, as separate mul/add
// instructions do.
func vexp(x float32) float32 {
	const r = float32(0x1.8p23)
	z := float32(x*0x1.715476p+0) + r
	n := z - r
	b := x - float32(n*0x1.62e4p-1)
	b = b - float32(n*0x1.7f7d1cp-20)
	e := f32bits(z) << 23
	k := f32from(e + f32bits(1))
	an := float32(math.Abs(float64(n)))
	c := an > 126
	u := float32(b * b)
	t1 := float32(0x1.0e4020p-7*b) + 0x1.573e2ep-5
	t2 := float32(0x1.555e66p-3*b) + 0x1.fffdb6p-2
	t3 := float32(t1*u) + t2
	j := float32(t3*u) + float32(0x1.ffffecp-1*b)
	if !c {
		return float32(j*k) + k
	}
	var g uint32
	if n <= 0 {
		g = 0x82000000
	}
	s1 := f32from(g + 0x7f000000)
	s2 := f32from(e - g)
	if an > 192 {
		return s1 * s1
	}
	return float32((float32(s2*j) + s2) * s1)
}

// SiLURow applies ggml_vec_silu_f32 to a row in place: the vector formula
// for each full group of four, x/(1+expf(-x)) for the rest.
func SiLURow(x []float32) {
	i := 0
	for ; i+3 < len(x); i += 4 {
		for l := i; l < i+4; l++ {
			x[l] = x[l] / (1 + vexp(0-x[l]))
		}
	}
	for ; i < len(x); i++ {
		x[i] = SiLU(x[i])
	}
}

// expSum is ggml_vec_soft_max_f32: y = exp(x - max), returning the sum in
// float64, each group of four summed in float32 as SSE2 does ((a+b)+(c+d)).
func expSum(y, x []float32, m float32) float64 {
	var sum float64
	i := 0
	for ; i+3 < len(x); i += 4 {
		for l := i; l < i+4; l++ {
			y[l] = vexp(x[l] - m)
		}
		sum += float64((y[i] + y[i+1]) + (y[i+2] + y[i+3]))
	}
	for ; i < len(x); i++ {
		y[i] = Exp(x[i] - m)
		sum += float64(y[i])
	}
	return sum
}
