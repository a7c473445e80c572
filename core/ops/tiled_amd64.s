//go:build !noasm

#include "textflag.h"

// Each multiply is broadcast value times the row and each add is the
// accumulator plus the product, the operand order of Go's compiled
// s += x * k, so that NaN payloads come out as in tileScoresGo.

// MULADD adds Y8 times the eight floats at off(base) to acc (t scratch).
#define MULADD(base, off, acc, t) \
	VMULPS off(base), Y8, t \
	VADDPS t, acc, acc

// func tileScoresAVX(q *float32, kt *float32, dk int, out *[64]float32)
TEXT ·tileScoresAVX(SB), NOSPLIT, $0-32
	MOVQ   q+0(FP), SI
	MOVQ   kt+8(FP), DI
	MOVQ   dk+16(FP), CX
	MOVQ   out+24(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loop:
	VBROADCASTSS (SI), Y8
	MULADD(DI, 0, Y0, Y9)
	MULADD(DI, 32, Y1, Y10)
	MULADD(DI, 64, Y2, Y11)
	MULADD(DI, 96, Y3, Y12)
	MULADD(DI, 128, Y4, Y13)
	MULADD(DI, 160, Y5, Y14)
	MULADD(DI, 192, Y6, Y15)
	MULADD(DI, 224, Y7, Y9)
	ADDQ         $4, SI
	ADDQ         $256, DI
	DECQ         CX
	JNZ          loop
	VMOVUPS      Y0, 0(DX)
	VMOVUPS      Y1, 32(DX)
	VMOVUPS      Y2, 64(DX)
	VMOVUPS      Y3, 96(DX)
	VMOVUPS      Y4, 128(DX)
	VMOVUPS      Y5, 160(DX)
	VMOVUPS      Y6, 192(DX)
	VMOVUPS      Y7, 224(DX)
	VZEROUPPER
	RET

// func tileAccum32AVX(acc *float32, w *float32, n int, v *float32, stride int, groups int)
TEXT ·tileAccum32AVX(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ v+24(FP), DX
	MOVQ stride+32(FP), R8
	SHLQ $2, R8
	MOVQ groups+40(FP), R9

group:
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	MOVQ    SI, AX
	MOVQ    DX, BX
	MOVQ    CX, R10

row:
	VBROADCASTSS (AX), Y8
	MULADD(BX, 0, Y0, Y9)
	MULADD(BX, 32, Y1, Y10)
	MULADD(BX, 64, Y2, Y11)
	MULADD(BX, 96, Y3, Y12)
	ADDQ         $4, AX
	ADDQ         R8, BX
	DECQ         R10
	JNZ          row
	VMOVUPS      Y0, 0(DI)
	VMOVUPS      Y1, 32(DI)
	VMOVUPS      Y2, 64(DI)
	VMOVUPS      Y3, 96(DI)
	ADDQ         $128, DI
	ADDQ         $128, DX
	DECQ         R9
	JNZ          group
	VZEROUPPER
	RET

// func widenHalf8F16C(dst *float32, src *uint16, n int)
TEXT ·widenHalf8F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

widen:
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JNZ       widen
	VZEROUPPER
	RET
