package ops

import "math"

// Rope is ggml's rotary position embedding (ggml_rope_ext, CPU backend)
// with its YaRN extension: the first Dims values of every head are turned
// pair by pair through angles pos·Base^(-2i/Dims), the rest pass through.
type Rope struct {
	Dims int // n_dims: rotated values at the start of each head (even)
	// Neox pairs value i with i+Dims/2 (GGML_ROPE_TYPE_NEOX, Qwen, GPT-NeoX);
	// otherwise adjacent values are paired (GGML_ROPE_TYPE_NORMAL, LLaMA).
	Neox bool
	Base float32 // freq_base
	// Scale is freq_scale, 1/(context scaling factor); 1 (or 0) is none.
	Scale float32
	// ExtFactor mixes extrapolated angles into the interpolated ones (YaRN;
	// 0: plain interpolation), over the dimensions BetaFast and BetaSlow
	// select for a training context of CtxOrig.
	ExtFactor          float32
	AttnFactor         float32 // mscale of cos and sin (0 means 1)
	BetaFast, BetaSlow float32
	CtxOrig            int
}

// cache fills cs with (cos, sin) of each rotated pair at position p, as
// ggml_rope_cache_init does: the angle advances by a float32 product per
// pair, and cos and sin are scaled by the YaRN magnitude.
func (r *Rope) cache(p int, corr [2]float32, thetaScale float32, cs []float32) {
	scale, mscale := r.Scale, r.AttnFactor
	if scale == 0 {
		scale = 1
	}
	if mscale == 0 {
		mscale = 1
	}
	theta := float32(p)
	for i0 := 0; i0 < r.Dims; i0 += 2 {
		interp := scale * theta
		t, ms := interp, mscale
		if r.ExtFactor != 0 {
			y := (float32(i0/2) - corr[0]) / max(0.001, corr[1]-corr[0])
			mix := (1 - min(1, max(0, y))) * r.ExtFactor
			t = interp*(1-mix) + theta*mix
			ms *= 1 + 0.1*Logf(1/scale)
		}
		cs[i0] = Cosf(t) * ms
		cs[i0+1] = Sinf(t) * ms
		theta *= thetaScale
	}
}

// corrDims is ggml_rope_yarn_corr_dims: the first and last dimension over
// which YaRN ramps from extrapolation to interpolation.
func (r *Rope) corrDims() [2]float32 {
	dim := func(beta float32) float32 {
		return float32(r.Dims) * Logf(float32(r.CtxOrig)/(beta*2*math.Pi)) / (2 * Logf(r.Base))
	}
	start := float32(math.Floor(float64(dim(r.BetaFast))))
	end := float32(math.Ceil(float64(dim(r.BetaSlow))))
	return [2]float32{max(0, start), min(float32(r.Dims-1), end)}
}

// Apply rotates x in place: n tokens of heads×headDim values, token t at
// position pos+t.
func (r *Rope) Apply(x []float32, n, heads, headDim, pos int) {
	thetaScale := float32(math.Pow(float64(r.Base), float64(-2/float32(r.Dims))))
	corr := r.corrDims()
	cs := make([]float32, r.Dims)
	for t := 0; t < n; t++ {
		r.cache(pos+t, corr, thetaScale, cs)
		for h := 0; h < heads; h++ {
			v := x[(t*heads+h)*headDim:][:headDim]
			if r.Neox {
				half := r.Dims / 2
				for i0 := 0; i0 < r.Dims; i0 += 2 {
					c, s := cs[i0], cs[i0+1]
					i := i0 / 2
					x0, x1 := v[i], v[i+half]
					v[i], v[i+half] = x0*c-x1*s, x0*s+x1*c
				}
				continue
			}
			for i0 := 0; i0 < r.Dims; i0 += 2 {
				c, s := cs[i0], cs[i0+1]
				x0, x1 := v[i0], v[i0+1]
				v[i0], v[i0+1] = x0*c-x1*s, x0*s+x1*c
			}
		}
	}
}
