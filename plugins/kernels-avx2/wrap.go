package kernelsavx2

// This file is kept identical (but for the package clause) in
// plugins/kernels-avx2 and plugins/kernels-avx512.

import "github.com/k3-inference/k3/core/quant"

// Adapters from the assembly signatures (pointers and a block count) to
// dotFunc. They are only called with lengths MatVec and Dot have checked;
// the slice expressions still make a short slice panic rather than read
// out of bounds.

const q8KSize = 292

//lint:ignore U1000 used by asm_amd64.go only
func kquant(f func(w, a *byte, nb int) float32, wsize int) dotFunc {
	return func(n int, w, a []byte) float32 {
		nb := n / quant.QK_K
		if nb == 0 {
			return 0
		}
		w, a = w[:nb*wsize], a[:nb*q8KSize]
		return f(&w[0], &a[0], nb)
	}
}

//lint:ignore U1000 used by asm_amd64.go only
func block32(f func(w, a *byte, nb int) float32, wsize int) dotFunc {
	return func(n int, w, a []byte) float32 {
		nb := n / 32
		if nb == 0 {
			return 0
		}
		w, a = w[:nb*wsize], a[:nb*34]
		return f(&w[0], &a[0], nb)
	}
}

// float adapts a plain-float kernel that handles multiples of step
// elements; the reference adds the rest.
//
//lint:ignore U1000 used by asm_amd64.go only
func float(f func(w, a *byte, n int) float32, t quant.Type, step int) dotFunc {
	es := t.TypeSize()
	return func(n int, w, a []byte) float32 {
		m := n &^ (step - 1)
		var s float32
		if m > 0 {
			w, a := w[:m*es], a[:m*es]
			s = f(&w[0], &a[0], m)
		}
		if m < n {
			s += refDot(t, n-m, w[m*es:], a[m*es:])
		}
		return s
	}
}

//lint:ignore U1000 used by asm_amd64.go only
func kquant4(f func(w, a *byte, nb, astride int, out *float32), wsize int) dot4Func {
	return func(n int, w, a []byte, astride int, out *[4]float32) {
		nb := n / quant.QK_K
		if nb == 0 {
			*out = [4]float32{}
			return
		}
		w, a = w[:nb*wsize], a[:3*astride+nb*q8KSize]
		f(&w[0], &a[0], nb, astride, &out[0])
	}
}
