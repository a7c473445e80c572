package main

// The prepared activation layout of the exact Q3_K/Q6_K kernels (their
// "P" variants), built by kernelkit (prep.go) once per activation row: per
// 256-element Q8_K block, the 256 quants already permuted into the
// kernels' lane order, then the quants' offset times each permuted pair
// (the 128 words VPMADDUBSW(offset, y) gives), then d. The weights are
// still permuted in the kernel; the activations, read once per weight row,
// no longer are: VPMADDUBSW, VPSUBW and VPDPWSSD per vector and row, all
// three from memory, instead of five operations. Must match kernelkit's
// prepBlock/prepOff/prepD.
const (
	q63PrepOff   = 256
	q63PrepD     = 512
	q63PrepBlock = 576
)

// q63Kinds are the variants genQ3KExact and genQ6KExact emit: one and four
// activation rows, on Q8_K rows and on prepared ones.
var q63Kinds = []struct {
	prep bool
	m    int
}{{false, 1}, {false, 4}, {true, 1}, {true, 4}}
