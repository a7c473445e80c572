// Package ops is k3's reference implementation of the operations a forward
// pass needs: matrix products over quantized weight rows, normalisations,
// activations, the short causal convolution, the gated delta rule and
// attention over a half-precision cache.
//
// Each op reproduces what ggml's CPU backend computes, down to where it
// rounds: activations are quantized to the weight's vec_dot_type before a
// dot product, sums that ggml keeps in double (ggml_float) are kept in
// float64 here, and the attention cache is stored as IEEE half. This is the
// semantics kernel plugins are held to and the fallback when a plugin does
// not advertise an op.
package ops
