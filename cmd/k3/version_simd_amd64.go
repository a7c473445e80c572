//go:build !noasm

package main

// simdCompiled are the instruction sets plugins/kernels-avx2 and
// kernels-avx512 have assembly for in this build (their asm_amd64.go carry
// the same build constraint); whether the CPU has them is Levels'.
var simdCompiled = []string{"avx2", "avx512", "avx512-vnni"}
