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
// 0x7E00 with f's sign, as in ggml's scalar conversion.
func FP32ToFP16(f float32) uint16 {
	const scaleToInf = float32(0x1.0p+112)
	const scaleToZero = float32(0x1.0p-110)
	// Two separate roundings, as in C: the conversions stop Go from fusing.
	base := float32(float32(abs32(f)*scaleToInf) * scaleToZero)

	w := math.Float32bits(f)
	shl1W := w + w
	sign := w & 0x80000000
	bias := shl1W & 0xFF000000
	if bias < 0x71000000 {
		bias = 0x71000000
	}

	base = math.Float32frombits((bias>>1)+0x07800000) + base
	bits := math.Float32bits(base)
	expBits := (bits >> 13) & 0x00007C00
	mantissaBits := bits & 0x00000FFF
	nonsign := expBits + mantissaBits
	if shl1W > 0xFF000000 {
		nonsign = 0x7E00
	}
	return uint16(sign>>16) | uint16(nonsign)
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
