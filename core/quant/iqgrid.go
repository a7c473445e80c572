package quant

// The grid-based IQ types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
// IQ3_S) store indices into fixed codebooks of 4 or 8 magnitudes, plus sign
// bits. The codebooks and sign tables are ggml's (ggml-common.h), generated
// into iqgrid_data.go; TestIQGridTablesMatchHeader checks them against the
// reference header.

//go:generate go run ./internal/ggmltables/gen -o iqgrid_data.go

// gridByte returns byte j (0-7) of a grid entry as C reads it through a
// uint8_t pointer on a little-endian machine.
func gridByte(g uint64, j int) uint8 { return uint8(g >> (8 * j)) }

// signFlip is ggml's "signs & kmask_iq2xs[j] ? -1 : 1".
func signFlip(signs uint8, j int) int32 {
	if signs&kmaskIq2xs[j] != 0 {
		return -1
	}
	return 1
}

// signF is signFlip as a float factor.
func signF(signs uint8, j int) float32 {
	if signs&kmaskIq2xs[j] != 0 {
		return -1
	}
	return 1
}
