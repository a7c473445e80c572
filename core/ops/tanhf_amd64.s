//go:build !noasm

#include "textflag.h"

#define C8(name, v) \
	DATA name<>+0(SB)/4, v;  DATA name<>+4(SB)/4, v;  DATA name<>+8(SB)/4, v;  DATA name<>+12(SB)/4, v; \
	DATA name<>+16(SB)/4, v; DATA name<>+20(SB)/4, v; DATA name<>+24(SB)/4, v; DATA name<>+28(SB)/4, v; \
	GLOBL name<>(SB), RODATA|NOPTR, $32

C8(thAbs, $0x7fffffff)
C8(thSign, $0x80000000)
C8(thOne, $0x3f800000)
C8(thTwo, $0x40000000)
C8(thThree, $0x40400000)
C8(thSix, $0x40c00000)
C8(thHalf, $0x3f000000)
C8(thHyM1, $0x3f851592)
C8(thHy0, $0x3eb17219)
C8(thLn2hi, $0x3f317180)
C8(thLn2lo, $0x3717f7d1)
C8(thInvln2, $0x3fb8aa3b)
C8(thQ1, $0xbd088889)
C8(thQ2, $0x3ad00d01)
C8(thQ3, $0xb8a670cd)
C8(thQ4, $0x36867e54)
C8(thQ5, $0xb457edbb)
C8(thShift, $0x01000000)
C8(th7f, $0x0000007f)
C8(th57, $57)
C8(th23, $23)
C8(thM1, $0xffffffff)

// func tanhf8AVX2(dst, src *float32, n int)
// Lanes outside 2^-26 <= |x| < 22 are left for the caller to redo.
TEXT ·tanhf8AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   done

loop:
	VMOVUPS (SI), Y0
	VANDPS  thAbs<>(SB), Y0, Y1    // a
	VANDPS  thSign<>(SB), Y0, Y15  // sign of x
	VMOVUPS thOne<>(SB), Y14
	VPCMPGTD Y1, Y14, Y14          // small: a < 1
	VMULPS  thTwo<>(SB), Y1, Y2    // 2a, whose bits are hy
	VMOVUPS thHyM1<>(SB), Y4
	VPCMPGTD Y2, Y4, Y4            // hy < 0x3f851592: k = -1
	VMOVUPS thHy0<>(SB), Y5
	VPCMPGTD Y2, Y5, Y5            // hy <= 0x3eb17218: k = 0
	VANDPS  thSign<>(SB), Y14, Y3
	VXORPS  Y3, Y2, Y2             // y = -2a in small lanes, 2a else
	VXORPS  thHalf<>(SB), Y3, Y6   // h = -0.5 or 0.5
	VMULPS  thInvln2<>(SB), Y2, Y7
	VADDPS  Y6, Y7, Y7
	VCVTTPS2DQ Y7, Y7
	VPOR    Y4, Y7, Y7
	VPANDN  Y7, Y5, Y7             // k

	VCVTDQ2PS Y7, Y3               // t
	VMULPS  thLn2hi<>(SB), Y3, Y4
	VSUBPS  Y4, Y2, Y4             // hi
	VMULPS  thLn2lo<>(SB), Y3, Y5  // lo
	VSUBPS  Y5, Y4, Y6             // r = hi - lo
	VSUBPS  Y6, Y4, Y4
	VSUBPS  Y5, Y4, Y4             // c = (hi - r) - lo
	VMULPS  thHalf<>(SB), Y6, Y3   // hfx
	VMULPS  Y3, Y6, Y5             // hxs
	VMULPS  thQ5<>(SB), Y5, Y8
	VADDPS  thQ4<>(SB), Y8, Y8
	VMULPS  Y8, Y5, Y8
	VADDPS  thQ3<>(SB), Y8, Y8
	VMULPS  Y8, Y5, Y8
	VADDPS  thQ2<>(SB), Y8, Y8
	VMULPS  Y8, Y5, Y8
	VADDPS  thQ1<>(SB), Y8, Y8
	VMULPS  Y8, Y5, Y8
	VADDPS  thOne<>(SB), Y8, Y8    // r1
	VMULPS  Y3, Y8, Y9
	VMOVUPS thThree<>(SB), Y10
	VSUBPS  Y9, Y10, Y9            // t3 = 3 - r1·hfx
	VSUBPS  Y9, Y8, Y8             // r1 - t3
	VMULPS  Y9, Y6, Y9
	VMOVUPS thSix<>(SB), Y10
	VSUBPS  Y9, Y10, Y9            // 6 - r·t3
	VDIVPS  Y9, Y8, Y8
	VMULPS  Y8, Y5, Y8             // e
	VMULPS  Y8, Y6, Y9
	VSUBPS  Y5, Y9, Y9
	VSUBPS  Y9, Y6, Y9             // k = 0: r - (r·e - hxs)
	VSUBPS  Y4, Y8, Y8
	VMULPS  Y8, Y6, Y8
	VSUBPS  Y4, Y8, Y8
	VSUBPS  Y5, Y8, Y8             // e = r·(e - c) - c - hxs
	VSUBPS  Y8, Y6, Y3
	VMULPS  thHalf<>(SB), Y3, Y3
	VSUBPS  thHalf<>(SB), Y3, Y3   // k = -1: 0.5·(r - e) - 0.5
	VPSLLD  $23, Y7, Y4            // k<<23
	VSUBPS  Y6, Y8, Y5             // e - r
	VMOVUPS thOne<>(SB), Y10
	VSUBPS  Y5, Y10, Y10
	VPADDD  Y4, Y10, Y10
	VSUBPS  thOne<>(SB), Y10, Y10  // k <= -2 or k > 56: scaled (1 - (e - r)) - 1
	VMOVUPS thShift<>(SB), Y11
	VPSRLVD Y7, Y11, Y11
	VMOVUPS thOne<>(SB), Y12
	VPSUBD  Y11, Y12, Y11
	VSUBPS  Y5, Y11, Y11
	VPADDD  Y4, Y11, Y11           // k < 23: scaled (1 - 2^-k) - (e - r)
	VMOVUPS th7f<>(SB), Y12
	VPSUBD  Y7, Y12, Y12
	VPSLLD  $23, Y12, Y12
	VADDPS  Y12, Y8, Y12
	VSUBPS  Y12, Y6, Y12
	VADDPS  thOne<>(SB), Y12, Y12
	VPADDD  Y4, Y12, Y12           // else: scaled (r - (e + 2^-k)) + 1

	VMOVUPS th57<>(SB), Y13
	VPCMPGTD Y7, Y13, Y13
	VBLENDVPS Y13, Y12, Y10, Y12
	VMOVUPS th23<>(SB), Y13
	VPCMPGTD Y7, Y13, Y13
	VBLENDVPS Y13, Y11, Y12, Y12   // large lanes' expm1f
	VPCMPEQD thM1<>(SB), Y7, Y13
	VBLENDVPS Y13, Y3, Y10, Y10
	VPXOR   Y13, Y13, Y13
	VPCMPEQD Y13, Y7, Y13
	VBLENDVPS Y13, Y9, Y10, Y10    // small lanes' expm1f
	VBLENDVPS Y14, Y10, Y12, Y10   // t

	VADDPS  thTwo<>(SB), Y10, Y11  // t + 2
	VXORPS  thSign<>(SB), Y10, Y3  // -t
	VMOVUPS thTwo<>(SB), Y4
	VBLENDVPS Y14, Y3, Y4, Y4
	VDIVPS  Y11, Y4, Y4            // -t/(t+2) or 2/(t+2)
	VMOVUPS thOne<>(SB), Y5
	VSUBPS  Y4, Y5, Y5             // 1 - 2/(t+2)
	VBLENDVPS Y14, Y4, Y5, Y5
	VXORPS  Y15, Y5, Y5
	VMOVUPS Y5, (DI)

	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  loop

done:
	VZEROUPPER
	RET
