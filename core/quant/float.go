package quant

import (
	"encoding/binary"
	"math"
)

// The plain float types. Their "quantization" is ggml_quantize_chunk's
// conversion (memcpy, ggml_fp32_to_fp16_row, ggml_fp32_to_bf16_row_ref),
// which is also what the CPU backend's scalar from_float does to activations.
// Their dot products follow ggml's scalar ggml_vec_dot_f32/f16/bf16: each
// product is rounded to float32 and the sum is kept in double (ggml_float),
// which is what the SSE2-only x64 build compiles to.

func init() {
	register(F32, &impl{dequantize: dequantizeF32, quantize: quantizeF32, vecDot: vecDotF32})
	register(F16, &impl{dequantize: dequantizeF16, quantize: quantizeF16, vecDot: vecDotF16})
	register(BF16, &impl{dequantize: dequantizeBF16, quantize: quantizeBF16, vecDot: vecDotBF16})
}

func f32At(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

func dequantizeF32(src []byte, dst []float32) {
	src = src[:4*len(dst)]
	for i := range dst {
		dst[i] = f32At(src[4*i:])
	}
}

func quantizeF32(src []float32, dst []byte) {
	dst = dst[:4*len(src)]
	for i, v := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
	}
}

func vecDotF32(n int, w, a []byte) float32 {
	w, a = w[:4*n], a[:4*n]
	var sum float64
	for i := 0; i < n; i++ {
		sum += float64(float32(f32At(w[4*i:]) * f32At(a[4*i:])))
	}
	return float32(sum)
}

func dequantizeF16(src []byte, dst []float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = FP16ToFP32(le16(src[2*i:]))
	}
}

func quantizeF16(src []float32, dst []byte) {
	dst = dst[:2*len(src)]
	for i, v := range src {
		put16(dst[2*i:], FP32ToFP16(v))
	}
}

func vecDotF16(n int, w, a []byte) float32 {
	w, a = w[:2*n], a[:2*n]
	var sum float64
	for i := 0; i < n; i++ {
		// Half products are exact in float32; the conversion only keeps Go
		// from fusing the multiply into the double add.
		sum += float64(float32(FP16ToFP32(le16(w[2*i:])) * FP16ToFP32(le16(a[2*i:]))))
	}
	return float32(sum)
}

func dequantizeBF16(src []byte, dst []float32) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = BF16ToFP32(le16(src[2*i:]))
	}
}

func quantizeBF16(src []float32, dst []byte) {
	dst = dst[:2*len(src)]
	for i, v := range src {
		put16(dst[2*i:], FP32ToBF16(v))
	}
}

func vecDotBF16(n int, w, a []byte) float32 {
	w, a = w[:2*n], a[:2*n]
	var sum float64
	for i := 0; i < n; i++ {
		sum += float64(float32(BF16ToFP32(le16(w[2*i:])) * BF16ToFP32(le16(a[2*i:]))))
	}
	return float32(sum)
}
