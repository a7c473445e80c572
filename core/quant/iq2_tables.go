package quant

// Copies of the IQ2 grids for SIMD kernels, which look entries up
// themselves (plugins/internal/kernelkit passes them to the assembly): the
// one source of the tables stays iqgrid_data.go.

// IQ2XXSGrid returns ggml's iq2xxs_grid.
func IQ2XXSGrid() [256]uint64 { return iq2xxsGrid }

// IQ2XSGrid returns ggml's iq2xs_grid.
func IQ2XSGrid() [512]uint64 { return iq2xsGrid }

// IQ2SGrid returns ggml's iq2s_grid.
func IQ2SGrid() [1024]uint64 { return iq2sGrid }
