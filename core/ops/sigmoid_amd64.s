//go:build !noasm

#include "textflag.h"

#define C4D(name, v) \
	DATA name<>+0(SB)/8, v; DATA name<>+8(SB)/8, v; DATA name<>+16(SB)/8, v; DATA name<>+24(SB)/8, v; \
	GLOBL name<>(SB), RODATA|NOPTR, $32

#define C8F(name, v) \
	DATA name<>+0(SB)/4, v;  DATA name<>+4(SB)/4, v;  DATA name<>+8(SB)/4, v;  DATA name<>+12(SB)/4, v; \
	DATA name<>+16(SB)/4, v; DATA name<>+20(SB)/4, v; DATA name<>+24(SB)/4, v; DATA name<>+28(SB)/4, v; \
	GLOBL name<>(SB), RODATA|NOPTR, $32

C4D(sgInvLn2N, $0x40471547652b82fe)
C4D(sgShift, $0x4338000000000000)
C4D(sgC0, $0x3ebc6af84b912394)
C4D(sgC1, $0x3f2ebfce50fac4f3)
C4D(sgC2, $0x3f962e42ff0c52d6)
C4D(sgOneD, $0x3ff0000000000000)
C4D(sgIdx, $31)
C8F(sgSign, $0x80000000)
C8F(sgOneF, $0x3f800000)

// EXPF4 is Expf's main path on the four floats of xin: float32 result in xout
// (Y1-Y9 scratch, AX = &expfTab).
#define EXPF4(xin, xout) \
	VCVTPS2PD  xin, Y1            \
	VMULPD     sgInvLn2N<>(SB), Y1, Y1 \
	VADDPD     sgShift<>(SB), Y1, Y2   \
	VSUBPD     sgShift<>(SB), Y2, Y3   \
	VSUBPD     Y3, Y1, Y1         \
	VPAND      sgIdx<>(SB), Y2, Y4 \
	VPSLLQ     $47, Y2, Y2        \
	VPCMPEQQ   Y5, Y5, Y5         \
	VPXOR      Y6, Y6, Y6         \
	VPGATHERQQ Y5, (AX)(Y4*8), Y6 \
	VPADDQ     Y2, Y6, Y6         \
	VMULPD     sgC0<>(SB), Y1, Y7 \
	VADDPD     sgC1<>(SB), Y7, Y7 \
	VMULPD     sgC2<>(SB), Y1, Y8 \
	VADDPD     sgOneD<>(SB), Y8, Y8 \
	VMULPD     Y1, Y1, Y9         \
	VMULPD     Y9, Y7, Y7         \
	VADDPD     Y8, Y7, Y7         \
	VMULPD     Y6, Y7, Y7         \
	VCVTPD2PSY Y7, xout

// func sigmoid8AVX2(dst, src *float32, n int)
TEXT ·sigmoid8AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	LEAQ ·expfTab(SB), AX
	SHRQ $3, CX
	JZ   done

loop:
	VMOVUPS (SI), Y0
	VXORPS  sgSign<>(SB), Y0, Y0   // -x
	VEXTRACTF128 $1, Y0, X11
	EXPF4(X0, X10)
	EXPF4(X11, X12)
	VINSERTF128 $1, X12, Y10, Y10  // expf(-x)
	VADDPS  sgOneF<>(SB), Y10, Y10
	VMOVUPS sgOneF<>(SB), Y11
	VDIVPS  Y10, Y11, Y11          // 1/(1 + expf(-x))
	VMOVUPS Y11, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  loop

done:
	VZEROUPPER
	RET
