package ops

import "math"

// tanhf8, where the CPU has a vector version, writes Tanhf of a prefix of
// src to dst and returns its length; lanes outside 2^-26 <= |x| < 22 are
// left for tanhfSlice to redo.
var tanhf8 func(dst, src []float32) int

// tanhfSlice writes Tanhf of each element of src to dst, which must not
// overlap src.
func tanhfSlice(dst, src []float32) {
	src = src[:len(dst)]
	n := 0
	if tanhf8 != nil {
		n = tanhf8(dst, src)
	}
	for i, x := range src[:n] {
		if ix := math.Float32bits(x) & 0x7fffffff; ix-0x32800000 >= 0x41b00000-0x32800000 {
			dst[i] = Tanhf(x)
		}
	}
	for i := n; i < len(dst); i++ {
		dst[i] = Tanhf(src[i])
	}
}

// sigmoid8 is tanhf8 for Sigmoid; lanes where Expf takes its special-case
// branch are left for sigmoidSlice to redo.
var sigmoid8 func(dst, src []float32) int

// sigmoidSlice writes Sigmoid of each element of src to dst, which must not
// overlap src.
func sigmoidSlice(dst, src []float32) {
	src = src[:len(dst)]
	n := 0
	if sigmoid8 != nil {
		n = sigmoid8(dst, src)
	}
	const lim = (0x42b00000 >> 20) & 0x7ff // Expf's test with 88's bits
	for i, x := range src[:n] {
		if (math.Float32bits(x)>>20)&0x7ff >= lim {
			dst[i] = Sigmoid(x)
		}
	}
	for i := n; i < len(dst); i++ {
		dst[i] = Sigmoid(src[i])
	}
}
