package kernelkit

import "github.com/k3-inference/k3/core/quant"

// The IQ2 kernels look grid entries up in core/quant's tables, copied
// once here and passed to them (tools/asmgen/iq2.go); the sign tables
// they compute.
var (
	iq2xxsGrid = quant.IQ2XXSGrid()
	iq2xsGrid  = quant.IQ2XSGrid()
	iq2sGrid   = quant.IQ2SGrid()
)

// addIQ2 adds f's IQ2_XXS, IQ2_XS and IQ2_S kernels to l.
func (l *level) addIQ2(f Funcs) {
	for _, k := range []struct {
		t    quant.Type
		grid *uint64
		one  func(w, a *byte, nb int, grid *uint64) float32
		four func(w, a *byte, nb, astride int, grid *uint64, out *float32)
	}{
		{quant.IQ2_XXS, &iq2xxsGrid[0], f.IQ2XXS, f.IQ2XXSx4},
		{quant.IQ2_XS, &iq2xsGrid[0], f.IQ2XS, f.IQ2XSx4},
		{quant.IQ2_S, &iq2sGrid[0], f.IQ2S, f.IQ2Sx4},
	} {
		grid, one, four := k.grid, k.one, k.four
		if one != nil {
			l.dot[k.t] = kquant(func(w, a *byte, nb int) float32 { return one(w, a, nb, grid) }, k.t.TypeSize())
		}
		if four != nil {
			l.dot4[k.t] = kquant4(func(w, a *byte, nb, astride int, out *float32) { four(w, a, nb, astride, grid, out) }, k.t.TypeSize())
		}
	}
}
