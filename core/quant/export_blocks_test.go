package quant

import "math/rand/v2"

// BlockInput is one named family of test rows, for the parity tests in
// package quant_test.
type BlockInput struct {
	Name string
	X    []float32
}

// BlockInputs draws n elements (a multiple of 32) from every family of
// blockInputCases.
func BlockInputs(seed uint64, n int) []BlockInput {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []BlockInput
	for _, c := range blockInputCases() {
		out = append(out, BlockInput{c.name, c.gen(rng, n)})
	}
	return out
}
