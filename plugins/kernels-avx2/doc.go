// Package kernelsavx2 implements the Kernels contract for AVX2+FMA CPUs.
package kernelsavx2
