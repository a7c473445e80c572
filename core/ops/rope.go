package ops

import "math"

// Rope is ggml's rotary position embedding (ggml_rope_ext on the CPU
// backend) with its YaRN extension: the first Dims values of every head
// are turned pair by pair through angles pos·Base^(-2i/Dims), the rest
// pass through. One implementation serves every architecture (deepseek2's
// MLA, the GQA of qwen3moe).
type Rope struct {
	Dims int // n_dims: rotated values at the start of each head (even)
	// Neox pairs value i with i+Dims/2 (GGML_ROPE_TYPE_NEOX: Qwen,
	// GPT-NeoX); otherwise adjacent values are paired
	// (GGML_ROPE_TYPE_NORMAL: LLaMA, DeepSeek).
	Neox bool
	Base float32 // freq_base
	// FreqScale is 1/factor of linear or YaRN scaling; 1 (or 0) is none.
	FreqScale float32
	// ExtFactor mixes extrapolated angles into the interpolated ones (YaRN;
	// 0: plain interpolation), over the dimensions BetaFast and BetaSlow
	// select for a training context of CtxOrig.
	ExtFactor          float32
	AttnFactor         float32 // mscale of cos and sin (0 means 1)
	BetaFast, BetaSlow float32
	CtxOrig            int // n_ctx_orig_yarn
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

// Cache fills cache (Dims values: cos and sin of each pair) for position
// pos, as ggml_rope_cache_init does: the angle advances by a float32
// product per pair, cos and sin are glibc's (Cosf, Sinf) and scaled by
// the YaRN magnitude. The float32 conversions keep the products rounded
// as ggml's C does (Go may otherwise fuse them into FMAs on some CPUs).
func (r *Rope) Cache(pos int, cache []float32) {
	thetaScale := float32(math.Pow(float64(r.Base), float64(-2/float32(r.Dims))))
	r.cache(pos, r.corrDims(), thetaScale, cache)
}

func (r *Rope) cache(pos int, corr [2]float32, thetaScale float32, cs []float32) {
	scale, mscale := r.FreqScale, r.AttnFactor
	if scale == 0 {
		scale = 1
	}
	if mscale == 0 {
		mscale = 1
	}
	theta := float32(pos)
	for i0 := 0; i0 < r.Dims; i0 += 2 {
		interp := scale * theta
		t, ms := interp, mscale
		if r.ExtFactor != 0 {
			y := (float32(i0/2) - corr[0]) / max(0.001, corr[1]-corr[0])
			mix := (1 - min(1, max(0, y))) * r.ExtFactor
			t = float32(interp*(1-mix)) + float32(theta*mix)
			ms *= 1 + float32(0.1*Logf(1/scale))
		}
		cs[i0] = Cosf(t) * ms
		cs[i0+1] = Sinf(t) * ms
		theta *= thetaScale
	}
}

// Rotate turns x[:Dims] (one head) in place with a cache made by Cache.
func (r *Rope) Rotate(x, cache []float32) {
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

// Apply rotates x in place: n tokens of heads×headDim values, token t at
// position pos+t.
func (r *Rope) Apply(x []float32, n, heads, headDim, pos int) {
	thetaScale := float32(math.Pow(float64(r.Base), float64(-2/float32(r.Dims))))
	corr := r.corrDims()
	cs := make([]float32, r.Dims)
	for t := 0; t < n; t++ {
		r.cache(pos+t, corr, thetaScale, cs)
		for h := 0; h < heads; h++ {
			r.Rotate(x[(t*heads+h)*headDim:][:headDim], cs)
		}
	}
}
