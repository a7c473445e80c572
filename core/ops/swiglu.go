package ops

// SwiGLU is ggml_swiglu_split on the CPU backend, in place:
// gate = silu(gate) * up, with ggml_vec_swiglu_f32's SSE2 vector SiLU on
// each full group of four and the scalar one on the rest. ggml applies it
// row by row; over several rows at once the result is the same when the
// row length is a multiple of four (every deepseek2 and qwen3moe FFN).
func SwiGLU(gate, up []float32) {
	SiLURow(gate)
	for i, u := range up {
		gate[i] *= u
	}
}
