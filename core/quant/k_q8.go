package quant

import (
	"encoding/binary"
	"math"
)

// Q8_K: the activation type of every K-quant dot product. A block is
// d (float32), qs [256]int8, bsums [16]int16 (the sums of each 16 quants,
// which let the dot products fold in the weight minimums cheaply).
// ggml never stores Q8_K tensors in files and has no Q8_K·Q8_K dot product,
// so it registers no vecDot.

const (
	q8KBytes     = 292
	q8KQsOff     = 4
	q8KBsumsOff  = 4 + QK_K
	q8KBsumCount = QK_K / 16
)

func init() {
	register(Q8_K, &impl{dequantize: dequantizeQ8K, quantize: quantizeQ8K})
}

func dequantizeQ8K(src []byte, dst []float32) {
	for b := 0; b < len(dst)/QK_K; b++ {
		blk := src[b*q8KBytes : (b+1)*q8KBytes]
		d := math.Float32frombits(binary.LittleEndian.Uint32(blk))
		y := dst[b*QK_K : (b+1)*QK_K]
		for j := range y {
			y[j] = d * float32(int8(blk[q8KQsOff+j]))
		}
	}
}

// quantizeQ8K is quantize_row_q8_K_ref, which is also what every x86 CPU
// variant of ggml uses to quantize activations (quantize_row_q8_K). The
// scale is -127/max, max being the signed element of largest magnitude
// (the first one on ties), so that element maps to -127 and d is negative
// when it is positive.
func quantizeQ8K(src []float32, dst []byte) {
	for b := 0; b < len(src)/QK_K; b++ {
		x := src[b*QK_K : (b+1)*QK_K]
		blk := dst[b*q8KBytes : (b+1)*q8KBytes]
		var max, amax float32
		for _, v := range x {
			if ax := abs32(v); ax > amax {
				amax, max = ax, v
			}
		}
		if amax == 0 {
			// ggml clears d and qs but leaves bsums as they were; k3
			// zeroes them so the output never depends on dst's old bytes.
			clear(blk)
			continue
		}
		iscale := -127 / max
		for j, v := range x {
			blk[q8KQsOff+j] = byte(int8(min(127, nearestInt(float32(iscale*v)))))
		}
		for j := 0; j < q8KBsumCount; j++ {
			sum := 0
			for _, q := range blk[q8KQsOff+16*j : q8KQsOff+16*j+16] {
				sum += int(int8(q))
			}
			binary.LittleEndian.PutUint16(blk[q8KBsumsOff+2*j:], uint16(int16(sum)))
		}
		binary.LittleEndian.PutUint32(blk, math.Float32bits(1/iscale))
	}
}

// q8KBlock gives a dot product's view of one Q8_K block.
type q8KBlock []byte

func (q q8KBlock) d() float32 { return math.Float32frombits(binary.LittleEndian.Uint32(q)) }
func (q q8KBlock) qs() []byte { return q[q8KQsOff : q8KQsOff+QK_K] }
func (q q8KBlock) bsum(j int) int32 {
	return int32(int16(binary.LittleEndian.Uint16(q[q8KBsumsOff+2*j:])))
}
