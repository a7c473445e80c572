// Package kernelsavx512 implements the Kernels contract for AVX-512 CPUs
// (F/BW/VL, VNNI where present).
package kernelsavx512
