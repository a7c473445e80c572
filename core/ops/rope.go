package ops

import "math"

// Rope is ggml's rotary position embedding (ggml_rope_ext on the CPU
// backend) with YaRN scaling: the first Dims values of a row (from an
// offset the caller picks) are rotated by position-dependent angles.
type Rope struct {
	Dims int  // n_dims: how many values are rotated
	Neox bool // pairs (i, i+Dims/2) as GGML_ROPE_TYPE_NEOX; else (2i, 2i+1), GGML_ROPE_TYPE_NORMAL
	Base float32
	// FreqScale is 1/factor of linear or YaRN scaling (1: none).
	FreqScale float32
	// ExtFactor mixes extrapolated angles into the low-frequency
	// dimensions (YaRN; 0: none); AttnFactor scales cos and sin.
	ExtFactor, AttnFactor float32
	BetaFast, BetaSlow    float32
	CtxOrig               int // n_ctx_orig_yarn
}

// corrDims is ggml_rope_yarn_corr_dims.
func (r *Rope) corrDims() (lo, hi float32) {
	dim := func(beta float32) float32 {
		return float32(r.Dims) * Logf(float32(r.CtxOrig)/(beta*2*float32(math.Pi))) / (2 * Logf(r.Base))
	}
	start := float32(math.Floor(float64(dim(r.BetaFast))))
	end := float32(math.Ceil(float64(dim(r.BetaSlow))))
	return max(0, start), min(float32(r.Dims-1), end)
}

// Cache fills cache (Dims values: cos and sin of each pair) for position
// pos, as ggml_rope_cache_init does.
func (r *Rope) Cache(pos int, cache []float32) {
	thetaScale := float32(math.Pow(float64(r.Base), float64(-2/float32(r.Dims))))
	lo, hi := r.corrDims()
	theta := float32(pos)
	for i0 := 0; i0 < r.Dims; i0 += 2 {
		interp := r.FreqScale * theta
		t, mscale := interp, r.AttnFactor
		if r.ExtFactor != 0 {
			y := (float32(i0/2) - lo) / max(0.001, hi-lo)
			mix := (1 - min(1, max(0, y))) * r.ExtFactor
			t = float32(interp*(1-mix)) + float32(theta*mix)
			mscale *= 1 + float32(0.1*Logf(1/r.FreqScale))
		}
		cache[i0] = float32(math.Cos(float64(t))) * mscale
		cache[i0+1] = float32(math.Sin(float64(t))) * mscale
		theta *= thetaScale
	}
}

// Apply rotates x[:Dims] in place with a cache made by Cache.
func (r *Rope) Apply(x, cache []float32) {
	n := r.Dims
	for i0 := 0; i0 < n; i0 += 2 {
		c, s := cache[i0], cache[i0+1]
		a, b := i0, i0+1
		if r.Neox {
			a, b = i0/2, i0/2+n/2
		}
		x0, x1 := x[a], x[b]
		x[a] = float32(x0*c) - float32(x1*s)
		x[b] = float32(x0*s) + float32(x1*c)
	}
}
