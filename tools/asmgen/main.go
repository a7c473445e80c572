// Command asmgen generates the amd64 assembly of k3's SIMD kernel plugins
// with avo. It is a separate, generate-only module so that the k3 module
// never depends on avo; the generated .s and stub files are committed.
//
// Regenerate both plugins (from the repository root):
//
//	go generate ./plugins/kernels-avx2/ ./plugins/kernels-avx512/
//
// which runs, for each target,
//
//	cd tools/asmgen && go run . -target avx2 -pkg kernelsavx2 \
//	    -out ../../plugins/kernels-avx2/kernels_amd64.s \
//	    -stubs ../../plugins/kernels-avx2/kernels_amd64.go
//
// Every kernel works on whole blocks of one tensor type; its Go wrapper
// checks lengths and its pure-Go reference (core/quant) is both the
// fallback and the test oracle. avo v0.5.0 predates AVX512_VNNI, so
// VPDPBUSD/VPDPWSSD are emitted as raw instructions (target.go, vnniOp).
//
// ggmlbench/ holds a C program (measurement only, not part of k3) that
// times llama.cpp's vec_dot on the same shapes as the Go benchmarks, and
// compare.sh, which runs both alternately and prints the ratios.
package main

import (
	"flag"
	"fmt"
	"os"

	. "github.com/mmcloughlin/avo/build"
)

var targetName = flag.String("target", "avx2", "avx2 or avx512")

func main() {
	flag.Parse() // avo's own flags (-out, -stubs, -pkg) live on flag.CommandLine too
	ConstraintExpr("!noasm")
	switch *targetName {
	case "avx2":
		genAll(targets["avx2"])
		genIQBMI2(targets["avx2bmi2"])
		genQuantizeQ8K("AVX2")
	case "avx512":
		genAll(targets["avx512"])
		genAll(targets["vnni"])
		genAll(targets["vnni256"])
		genQuantizeQ8K("AVX512")
	default:
		fmt.Fprintf(os.Stderr, "asmgen: unknown target %q\n", *targetName)
		os.Exit(2)
	}
	Generate()
}

// genIQBMI2 emits the grid kernels whose indices BMI2 makes (wordIdx).
func genIQBMI2(t *target) {
	genRows(t, genIQ2S, genIQ3S, genIQ1S, genIQ1M)
}

// genRows emits each kernel on one and on four activation rows.
func genRows(t *target, gens ...func(*target, int)) {
	for _, rows := range []int{1, 4} {
		for _, gen := range gens {
			gen(t, rows)
		}
	}
}

// genAll emits every dot-product kernel for one target.
func genAll(t *target) {
	genQ2KExact(t)
	genQ3KExact(t, false)
	genQ6KExact(t, false)
	if t.vnni {
		genQ3KExact(t, true)
		genQ6KExact(t, true)
		if !t.zmm() {
			genQ36(t)
			genQ4V(t)
		}
	}
	genQ4KExact(t)
	genQ5KExact(t)
	if t.w == 32 {
		q4mmGenPrep(t) // once per plugin: avx2, or vnni256 among the AVX-512 targets
	}
	genExactB32(t, b32Q8_0)
	genExactB32(t, b32Q4_0)
	genExactB32(t, b32Q5_0)
	genExactB32(t, b32MXFP4)
	genExactB32(t, b32IQ4NL)
	genExactB32(t, b32Q4_1)
	genExactB32(t, b32Q5_1)
	genIQ4XSRow(t)
	genIQ4XSRows8(t)
	if !t.zmm() || !t.vnni {
		genIQ2All(t) // 256-bit code; the 512-bit VNNI level runs the VNNI256 ones
	}
	genIQ13(t)
	if t.zmm() || !t.vnni {
		// The 256-bit VNNI level runs the 512-bit ones (asm_amd64.go).
		genTQ2B4(t)
		genTQ1(t)
		genTQ2x4(t)
		genTQ1x4(t)
	}
	genExactFloat(t, "F32")
	genExactFloat(t, "F16")
	genExactFloat(t, "BF16")
	genSeqFloat(t, "F32")
	genSeqFloat(t, "F16")
	genSeqFloat(t, "BF16")
	if !t.vnni {
		// Once per plugin: no VNNI in them; the VNNI levels run the
		// 512-bit ones.
		genFastFloat(t, "F32")
		genFastFloat(t, "F16")
		genFastFloat(t, "BF16")
		genFastPrep(t)
	}
}
