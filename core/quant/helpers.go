package quant

import (
	"encoding/binary"
	"math"
)

// Scalar helpers that reproduce C's float behaviour exactly; the reference
// kernels of every type share them so that they round the way ggml does.

// nearestInt rounds f to the nearest integer, ties to even, as ggml's
// nearest_int: adding 1.5*2^23 pushes the fraction out of the float32
// mantissa under the FPU's round-to-nearest-even. Valid for |f| <= 4194303;
// outside that range it returns what ggml's trick returns (garbage), not a
// saturated value.
func nearestInt(f float32) int {
	v := f + 12582912
	i := int32(math.Float32bits(v))
	return int((i & 0x007fffff) - 0x00400000)
}

// abs32 is C's fabsf.
func abs32(f float32) float32 { return math.Float32frombits(math.Float32bits(f) &^ (1 << 31)) }

// roundf is C's roundf: nearest integer, halfway cases away from zero.
// Widening to float64 is exact, so math.Round gives the same value.
func roundf(f float32) float32 { return float32(math.Round(float64(f))) }

// cvtt is C's (int) conversion of a float as x86-64 compilers emit it
// (cvttss2si): toward zero, and the "integer indefinite" 0x80000000 for NaN
// and out-of-range values. ggml's quantizers convert straight to int8_t or
// uint8_t, which the compiler does through this 32-bit conversion followed by
// truncation; int8(cvtt(f)) and uint8(cvtt(f)) reproduce that, including for
// the NaN and Inf a zero or overflowing scale produces. Go's own conversion is
// implementation-specific out of range, hence the explicit checks.
func cvtt(f float32) int32 {
	if !(f > -2147483904 && f < 2147483648) { // NaN fails both
		return math.MinInt32
	}
	return int32(f)
}

// le16 reads the little-endian uint16 at b[0:2]; half-precision scales in
// block headers are stored this way.
func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

// put16 stores v little-endian at b[0:2].
func put16(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }

// f16At decodes the half-precision float stored at b[0:2].
func f16At(b []byte) float32 { return FP16ToFP32(le16(b)) }

// putF16 stores f as half precision at b[0:2].
func putF16(b []byte, f float32) { put16(b, FP32ToFP16(f)) }
