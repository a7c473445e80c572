package ops

// SwiGLU writes silu(gate)·up into gate, as ggml_vec_swiglu_f32 in the
// scalar (SSE2) CPU build: SiLU through the four-lane exponential (see
// vexp) for each full group of four, x/(1+expf(-x)) for the rest.
func SwiGLU(gate, up []float32) {
	up = up[:len(gate)]
	i := 0
	for ; i+3 < len(gate); i += 4 {
		for l := i; l < i+4; l++ {
			x := gate[l]
			gate[l] = x / (1 + vexp(0-x)) * up[l]
		}
	}
	for ; i < len(gate); i++ {
		gate[i] = SiLU(gate[i]) * up[i]
	}
}
