//go:build !noasm

#include "textflag.h"

DATA halfaccSign<>+0(SB)/4, $0x80000000
GLOBL halfaccSign<>(SB), RODATA|NOPTR, $4
DATA halfaccQNaN<>+0(SB)/4, $0x7fc00000
GLOBL halfaccQNaN<>(SB), RODATA|NOPTR, $4

// ROUND rounds the eight floats of r to half and back in place, NaNs
// becoming sign|0x7fc00000 (t0, t1, t2 are scratch; Y8 sign mask, Y9 quiet NaN).
#define ROUND(r, x, t0, t1) \
	VCVTPS2PH $0, r, x        \
	VCMPPS    $3, r, r, t0    \
	VANDPS    Y8, r, t1       \
	VORPS     Y9, t1, t1      \
	VCVTPH2PS x, r            \
	VBLENDVPS t0, t1, r, r

// func halfAccF16C(acc *float32, v *uint16, n int, ms, vs float32)
TEXT ·halfAccF16C(SB), NOSPLIT, $0-32
	MOVQ         acc+0(FP), DI
	MOVQ         v+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS ms+24(FP), Y6
	VBROADCASTSS vs+28(FP), Y7
	VBROADCASTSS halfaccSign<>(SB), Y8
	VBROADCASTSS halfaccQNaN<>(SB), Y9
	MOVL         ms+24(FP), AX
	CMPL         AX, $0x3f800000
	JEQ          plain

scaled:
	VMOVUPS   (DI), Y0
	VMULPS    Y6, Y0, Y0
	ROUND(Y0, X2, Y3, Y4)
	VCVTPH2PS (SI), Y1
	VMULPS    Y7, Y1, Y1
	VADDPS    Y0, Y1, Y0
	ROUND(Y0, X2, Y3, Y4)
	VMOVUPS   Y0, (DI)
	ADDQ      $32, DI
	ADDQ      $16, SI
	SUBQ      $8, CX
	JNZ       scaled
	VZEROUPPER
	RET

plain:
	VMOVUPS   (DI), Y0
	VCVTPH2PS (SI), Y1
	VMULPS    Y7, Y1, Y1
	VADDPS    Y0, Y1, Y0
	ROUND(Y0, X2, Y3, Y4)
	VMOVUPS   Y0, (DI)
	ADDQ      $32, DI
	ADDQ      $16, SI
	SUBQ      $8, CX
	JNZ       plain
	VZEROUPPER
	RET

// LOADMUL widens eight halves of row r (at BX) and multiplies them by q.
#define LOADMUL(off, y) \
	VCVTPH2PS off(BX), y \
	VMULPS    Y8, y, y

// ADDEL adds the products of one element for rows 0-3 (xmm a) and 4-7
// (xmm b) to the float64 sums in Y14 and Y15.
#define ADDEL(a, b) \
	VCVTPS2PD a, Y10    \
	VADDPD    Y10, Y14, Y14 \
	VCVTPS2PD b, Y11    \
	VADDPD    Y11, Y15, Y15

// func dotHalf8F16C(k *uint16, stride int, q *float32, n int, sums *[8]float64)
//
// Eight rows' dot products with q: per row, float32 products of the widened
// half and q summed in float64 in element order, the rows in the lanes of
// Y14 (rows 0-3) and Y15 (rows 4-7). n is a multiple of 8.
TEXT ·dotHalf8F16C(SB), NOSPLIT, $0-40
	MOVQ   k+0(FP), SI
	MOVQ   stride+8(FP), DX
	SHLQ   $1, DX
	MOVQ   q+16(FP), DI
	MOVQ   n+24(FP), CX
	MOVQ   sums+32(FP), AX
	VMOVUPD (AX), Y14
	VMOVUPD 32(AX), Y15
	LEAQ   (SI)(DX*4), R9 // row 4

loop:
	VMOVUPS (DI), Y8
	MOVQ    SI, BX
	LOADMUL(0, Y0)
	ADDQ    DX, BX
	LOADMUL(0, Y1)
	ADDQ    DX, BX
	LOADMUL(0, Y2)
	ADDQ    DX, BX
	LOADMUL(0, Y3)
	MOVQ    R9, BX
	LOADMUL(0, Y4)
	ADDQ    DX, BX
	LOADMUL(0, Y5)
	ADDQ    DX, BX
	LOADMUL(0, Y6)
	ADDQ    DX, BX
	LOADMUL(0, Y7)

	VUNPCKLPS Y1, Y0, Y9
	VUNPCKHPS Y1, Y0, Y0
	VUNPCKLPS Y3, Y2, Y1
	VUNPCKHPS Y3, Y2, Y2
	VSHUFPS   $0x44, Y1, Y9, Y3
	VSHUFPS   $0xEE, Y1, Y9, Y9
	VSHUFPS   $0x44, Y2, Y0, Y1
	VSHUFPS   $0xEE, Y2, Y0, Y0
	// rows 0-3: element e in Y3, Y9, Y1, Y0 (low lane e, high lane e+4)
	VUNPCKLPS Y5, Y4, Y2
	VUNPCKHPS Y5, Y4, Y4
	VUNPCKLPS Y7, Y6, Y5
	VUNPCKHPS Y7, Y6, Y6
	VSHUFPS   $0x44, Y5, Y2, Y7
	VSHUFPS   $0xEE, Y5, Y2, Y2
	VSHUFPS   $0x44, Y6, Y4, Y5
	VSHUFPS   $0xEE, Y6, Y4, Y4
	// rows 4-7: element e in Y7, Y2, Y5, Y4

	ADDEL(X3, X7)
	ADDEL(X9, X2)
	ADDEL(X1, X5)
	ADDEL(X0, X4)
	VEXTRACTF128 $1, Y3, X3
	VEXTRACTF128 $1, Y7, X7
	ADDEL(X3, X7)
	VEXTRACTF128 $1, Y9, X9
	VEXTRACTF128 $1, Y2, X2
	ADDEL(X9, X2)
	VEXTRACTF128 $1, Y1, X1
	VEXTRACTF128 $1, Y5, X5
	ADDEL(X1, X5)
	VEXTRACTF128 $1, Y0, X0
	VEXTRACTF128 $1, Y4, X4
	ADDEL(X0, X4)

	ADDQ $16, SI
	ADDQ $16, R9
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ  loop

	VMOVUPD Y14, (AX)
	VMOVUPD Y15, 32(AX)
	VZEROUPPER
	RET

// TRANSADD transposes the products of eight rows by eight elements in Y0-Y7
// and adds them, element after element, to the float64 sums of rows 0-3
// (Y14) and 4-7 (Y15). Y9-Y11 are scratch.
#define TRANSADD \
	VUNPCKLPS Y1, Y0, Y9          \
	VUNPCKHPS Y1, Y0, Y0          \
	VUNPCKLPS Y3, Y2, Y1          \
	VUNPCKHPS Y3, Y2, Y2          \
	VSHUFPS   $0x44, Y1, Y9, Y3   \
	VSHUFPS   $0xEE, Y1, Y9, Y9   \
	VSHUFPS   $0x44, Y2, Y0, Y1   \
	VSHUFPS   $0xEE, Y2, Y0, Y0   \
	VUNPCKLPS Y5, Y4, Y2          \
	VUNPCKHPS Y5, Y4, Y4          \
	VUNPCKLPS Y7, Y6, Y5          \
	VUNPCKHPS Y7, Y6, Y6          \
	VSHUFPS   $0x44, Y5, Y2, Y7   \
	VSHUFPS   $0xEE, Y5, Y2, Y2   \
	VSHUFPS   $0x44, Y6, Y4, Y5   \
	VSHUFPS   $0xEE, Y6, Y4, Y4   \
	ADDEL(X3, X7)                 \
	ADDEL(X9, X2)                 \
	ADDEL(X1, X5)                 \
	ADDEL(X0, X4)                 \
	VEXTRACTF128 $1, Y3, X3       \
	VEXTRACTF128 $1, Y7, X7       \
	ADDEL(X3, X7)                 \
	VEXTRACTF128 $1, Y9, X9       \
	VEXTRACTF128 $1, Y2, X2       \
	ADDEL(X9, X2)                 \
	VEXTRACTF128 $1, Y1, X1       \
	VEXTRACTF128 $1, Y5, X5       \
	ADDEL(X1, X5)                 \
	VEXTRACTF128 $1, Y0, X0       \
	VEXTRACTF128 $1, Y4, X4       \
	ADDEL(X0, X4)

// DECAYROW decays row r (at BX) by Y12 in place and leaves its products
// with k (Y13) in y.
#define DECAYROW(y) \
	VMOVUPS (BX), y    \
	VMULPS  Y12, y, y  \
	VMOVUPS y, (BX)    \
	VMULPS  Y13, y, y

// UPDATEROW adds k (Y13) times the row's delta (at d) to row r (at BX) and
// leaves its products with q (Y12) in y.
#define UPDATEROW(d, y) \
	VBROADCASTSS d, Y8   \
	VMULPS  Y8, Y13, Y8  \
	VMOVUPS (BX), y      \
	VADDPS  Y8, y, y     \
	VMOVUPS y, (BX)      \
	VMULPS  Y12, y, y

// ROWS8 runs m on the eight rows: BX walks from SI by DX, row 4 from R9.
#define ROWS8(m0, m1, m2, m3, m4, m5, m6, m7) \
	MOVQ SI, BX \
	m0          \
	ADDQ DX, BX \
	m1          \
	ADDQ DX, BX \
	m2          \
	ADDQ DX, BX \
	m3          \
	MOVQ R9, BX \
	m4          \
	ADDQ DX, BX \
	m5          \
	ADDQ DX, BX \
	m6          \
	ADDQ DX, BX \
	m7

// func deltaRows8AVX(rows *float32, s int, decay, k, q, v, o *float32, b, scale float32)
//
// deltaRows4 for eight rows of s (a multiple of 8) floats, the rows' float64
// sums in the lanes of Y14 and Y15.
TEXT ·deltaRows8AVX(SB), NOSPLIT, $32-64
	MOVQ rows+0(FP), R13
	MOVQ s+8(FP), DX
	SHLQ $2, DX
	LEAQ (R13)(DX*4), R14 // row 4

	// decay, dot with k
	MOVQ   decay+16(FP), R10
	MOVQ   k+24(FP), R11
	MOVQ   s+8(FP), CX
	MOVQ   R13, SI
	MOVQ   R14, R9
	VXORPD Y14, Y14, Y14
	VXORPD Y15, Y15, Y15

pass1:
	VMOVUPS (R10), Y12
	VMOVUPS (R11), Y13
	ROWS8(DECAYROW(Y0), DECAYROW(Y1), DECAYROW(Y2), DECAYROW(Y3), DECAYROW(Y4), DECAYROW(Y5), DECAYROW(Y6), DECAYROW(Y7))
	TRANSADD
	ADDQ $32, SI
	ADDQ $32, R9
	ADDQ $32, R10
	ADDQ $32, R11
	SUBQ $8, CX
	JNZ  pass1

	// delta = (v - float32(sum)) * b, kept at 0(SP)
	VCVTPD2PSY   Y14, X0
	VCVTPD2PSY   Y15, X1
	VINSERTF128  $1, X1, Y0, Y0
	MOVQ         v+40(FP), AX
	VMOVUPS      (AX), Y1
	VSUBPS       Y0, Y1, Y1
	VBROADCASTSS b+56(FP), Y2
	VMULPS       Y2, Y1, Y1
	VMOVUPS      Y1, 0(SP)

	// update, dot with q
	MOVQ   k+24(FP), R11
	MOVQ   q+32(FP), R12
	MOVQ   s+8(FP), CX
	MOVQ   R13, SI
	MOVQ   R14, R9
	VXORPD Y14, Y14, Y14
	VXORPD Y15, Y15, Y15

pass2:
	VMOVUPS (R11), Y13
	VMOVUPS (R12), Y12
	ROWS8(UPDATEROW(0(SP), Y0), UPDATEROW(4(SP), Y1), UPDATEROW(8(SP), Y2), UPDATEROW(12(SP), Y3), UPDATEROW(16(SP), Y4), UPDATEROW(20(SP), Y5), UPDATEROW(24(SP), Y6), UPDATEROW(28(SP), Y7))
	TRANSADD
	ADDQ $32, SI
	ADDQ $32, R9
	ADDQ $32, R11
	ADDQ $32, R12
	SUBQ $8, CX
	JNZ  pass2

	VCVTPD2PSY   Y14, X0
	VCVTPD2PSY   Y15, X1
	VINSERTF128  $1, X1, Y0, Y0
	VBROADCASTSS scale+60(FP), Y2
	VMULPS       Y2, Y0, Y0
	MOVQ         o+48(FP), AX
	VMOVUPS      Y0, (AX)
	VZEROUPPER
	RET
