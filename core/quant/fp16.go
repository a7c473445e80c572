package quant

import "math"

// IEEE half and bfloat16 conversions, bit-exact with ggml's scalar
// ggml_compute_fp16_to_fp32 / ggml_compute_fp32_to_fp16 (the FP16 library's
// branch-free algorithm) and ggml_compute_fp32_to_bf16. The float tricks are
// reproduced with the same float32 operations, so they round to nearest even,
// keep subnormals and map NaN the way ggml does.

// fp16Table holds FP16ToFP32 of every half (256 KiB), as ggml's
// ggml_table_f32_f16: a load is several times faster than the bit trick, and
// every block scale goes through it.
var fp16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = fp16ToFP32Compute(uint16(h))
	}
	return &t
}()

// FP16ToFP32 widens an IEEE binary16 value. It is exact for every input.
func FP16ToFP32(h uint16) float32 { return fp16Table[h] }

func fp16ToFP32Compute(h uint16) float32 {
	w := uint32(h) << 16
	sign := w & 0x80000000
	twoW := w + w

	const expOffset = uint32(0xE0) << 23
	const expScale = float32(0x1.0p-112)
	normalized := math.Float32frombits((twoW>>4)+expOffset) * expScale

	const magicMask = uint32(126) << 23
	const magicBias = float32(0.5)
	denormalized := math.Float32frombits((twoW>>17)|magicMask) - magicBias

	const denormalizedCutoff = uint32(1) << 27
	if twoW < denormalizedCutoff {
		return math.Float32frombits(sign | math.Float32bits(denormalized))
	}
	return math.Float32frombits(sign | math.Float32bits(normalized))
}

// FP32ToFP16 narrows f to IEEE binary16, rounding to nearest even; values
// past the half range become ±Inf and every NaN becomes the quiet NaN
// 0x7E00 with f's sign, as in ggml's scalar conversion. It gives the same
// bits as ggml's float algorithm (kept in the tests as the reference, and
// checked on every float32) with integer steps the compiler turns into
// conditional moves: the attention cache rounds through it for every value.
func FP32ToFP16(f float32) uint16 {
	w := math.Float32bits(f)
	a := w & 0x7fffffff
	// Normal halves: round the low 13 mantissa bits to nearest even (a carry
	// into the exponent is the correct result) and rebias the exponent.
	h := (a + (a>>13)&1 - (0x38000000 - 0xfff)) >> 13
	// Below 2^-14 the half is a multiple of 2^-24: adding 0.5, whose ulp
	// that is, rounds to it in the hardware, and the mantissa is the count.
	// It is computed for every input so that the choice is a move, not a jump.
	sub := math.Float32bits(math.Float32frombits(a)+0.5) - 0x3f000000
	if a < 0x38800000 {
		h = sub
	}
	h = min(h, 0x7c00) // past 65520: Inf
	if a > 0x7f800000 {
		h = 0x7e00
	}
	return uint16(w>>16&0x8000 | h)
}

// RoundFP16 is FP16ToFP32(FP32ToFP16(f)): f rounded to the nearest half,
// kept as a float32, for accumulators that live in half precision.
func RoundFP16(f float32) float32 {
	w := math.Float32bits(f)
	a := w & 0x7fffffff
	r := (a + 0xfff + (a>>13)&1) &^ 0x1fff // as in FP32ToFP16
	if a < 0x38800000 {
		// A jump, not a move, to stay within the inlining budget: only a
		// zero or a value below 2^-14 takes it.
		r = math.Float32bits(math.Float32frombits(a) + 0.5 - 0.5)
	}
	if a >= 0x477ff000 { // rounds to 65536 or more
		r = 0x7f800000
	}
	if a > 0x7f800000 {
		r = 0x7fc00000
	}
	return math.Float32frombits(w ^ a | r)
}

// BF16ToFP32 widens a bfloat16 value (the top half of a float32).
func BF16ToFP32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// FP32ToBF16 narrows f to bfloat16, rounding to nearest even and quieting
// NaNs, as ggml_compute_fp32_to_bf16 (which does not flush subnormals).
func FP32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + ((u >> 16) & 1))) >> 16)
}

// E8M0ToFP32 decodes an OCP MX shared scale (a bare biased exponent) as
// ggml_e8m0_to_fp32: 2^(x-127), with x = 0 giving the subnormal 2^-127.
// 0xFF (NaN in the OCP spec) decodes as +Inf, since ggml does not special-case it.
func E8M0ToFP32(x uint8) float32 {
	if x == 0 {
		return math.Float32frombits(0x00400000)
	}
	return math.Float32frombits(uint32(x) << 23)
}

// E8M0ToFP32Half is E8M0ToFP32(x)/2 (ggml_e8m0_to_fp32_half), the scale MXFP4
// uses because its value table holds doubled E2M1 values.
func E8M0ToFP32Half(x uint8) float32 {
	if x < 2 {
		return math.Float32frombits(0x00200000 << x)
	}
	return math.Float32frombits(uint32(x-1) << 23)
}
