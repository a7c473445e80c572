package main

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

// The exact Q4_K/Q5_K kernels' "P" variants read an activation row in
// kernelkit's prepared layout (q63prep.go), prepared once per MatVec: the
// quants already in lane order, so a vector of products is one VPMADDUBSW
// from memory instead of a permute (VPERMB, or VPERMD and VPSHUFB) and the
// VPMADDUBSW. They use no offset words (prepared with offset 0); kernelkit
// copies the block's bsums, which the mins need, after d.
const q45pBsums = q63PrepD + 4

// q45pPairs is where kernelkit puts, after the bsums, their eight pair
// sums bsums[2k]+bsums[2k+1] as words (|sum| <= 4064): the q4v kernels'
// mins take one VPMADDWD of 128 bits with them (q4v.go).
const q45pPairs = q45pBsums + 32

// q45pQs, q45pD, q45pBsums and q45pSize are where x reads its activation
// blocks' quants, d and bsums, and how far apart the blocks are.
func (x *xk) q45pQs() int {
	if x.prep {
		return 0
	}
	return q8KQs
}

func (x *xk) q45pD() int {
	if x.prep {
		return q63PrepD
	}
	return 0
}

func (x *xk) q45pBsums() int {
	if x.prep {
		return q45pBsums
	}
	return q8KBsums
}

func (x *xk) q45pSize() int {
	if x.compact {
		return q4mmPrepBlock
	}
	if x.prep {
		return q63PrepBlock
	}
	return q8KSize
}

// q45pProducts returns VPMADDUBSW of the unsigned quants u with vector i
// of the activation quants at a.
func (x *xk) q45pProducts(a Mem, i int, u VecVirtual) VecVirtual {
	m := a.Offset(x.q45pQs() + i*x.t.w)
	if x.prep {
		y := x.t.vec()
		VPMADDUBSW(m, u, y)
		return y
	}
	y := x.perm.perm(m)
	VPMADDUBSW(y, u, y)
	return y
}
