package quant_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/tools/parity"
)

// Parity of the grid-based IQ types with libggml: dequantize and the
// generic Q8_K dot products, bit for bit, on 100k random blocks per type
// (-short: 4k; $K3_K_PARITY_BLOCKS), plus blocks that walk every grid
// index through the reference's dequantize.

var iqGridTypes = []quant.Type{quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ3_XXS, quant.IQ3_S,
	quant.IQ1_S, quant.IQ1_M}

// rawIQBlocks returns n blocks of random bytes (every byte pattern is a
// valid IQ block: the grid indices cover their grids exactly) with finite
// random scales.
func rawIQBlocks(r *rand.Rand, t quant.Type, n int) []byte {
	b := rawBlocks(r, t, n)
	size := t.TypeSize()
	for i := 0; i < n; i++ {
		setIQScale(b[i*size:(i+1)*size], t, quant.FP32ToFP16(float32(r.NormFloat64()*logUniform(r, -7, 1))))
	}
	return b
}

// setIQScale stores the fp16 super-block scale h into blk. IQ1_M spreads it
// over the top nibbles of its four uint16 scale words.
func setIQScale(blk []byte, t quant.Type, h uint16) {
	if t != quant.IQ1_M {
		binary.LittleEndian.PutUint16(blk, h)
		return
	}
	for k := 0; k < 4; k++ {
		w := binary.LittleEndian.Uint16(blk[48+2*k:])
		w = w&0x0fff | (h>>(4*k)&0xf)<<12
		binary.LittleEndian.PutUint16(blk[48+2*k:], w)
	}
}

func TestIQGridParity(t *testing.T) {
	r := parity.Require(t)
	nb := kParityBlocks(t) / kRowBlocks * kRowBlocks

	// Activations: ggml's own Q8_K quantization of the K-quant input
	// families for half the rows, raw Q8_K blocks for the other half.
	xa, _ := kInputs(21, nb/2)
	act, err := r.FromFloat(quant.Q8_K, xa[:nb/2/kRowBlocks*kRowBlocks*quant.QK_K], parity.Generic)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(22, 22))
	act = append(act, rawBlocks(rng, quant.Q8_K, nb-len(act)/quant.Q8_K.TypeSize())...)

	for _, typ := range iqGridTypes {
		t.Run(typ.String(), func(t *testing.T) {
			w := rawIQBlocks(rand.New(rand.NewPCG(uint64(typ), 23)), typ, nb)
			checkDequantize(t, r, typ, w)
			checkIQVecDot(t, r, typ, w, act)
		})
	}
}

// checkIQVecDot compares the dot products of the rows of w and a (kRowBlocks
// super-blocks each) with the generic reference bit for bit, then with the
// native variant and shorter rows.
func checkIQVecDot(t *testing.T, r *parity.Ref, typ quant.Type, w, a []byte) {
	t.Helper()
	for _, rowBlocks := range []int{kRowBlocks, 1, 3} {
		n := rowBlocks * quant.QK_K
		ws, as := rowBlocks*typ.TypeSize(), rowBlocks*quant.Q8_K.TypeSize()
		rows := min(len(w)/ws, len(a)/as)
		if rowBlocks != kRowBlocks {
			rows = min(rows, 4000)
		}
		got := make([]float32, rows)
		for i := range got {
			v, err := quant.VecDot(typ, n, w[i*ws:(i+1)*ws], a[i*as:(i+1)*as])
			if err != nil {
				t.Fatal(err)
			}
			got[i] = v
		}
		generic, err := r.VecDot(typ, n, rows, w[:rows*ws], a[:rows*as], parity.Generic)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(generic[i]) {
				if bad++; bad <= 3 {
					t.Errorf("vec_dot n=%d: row %d = %g (%#08x), generic reference %g (%#08x)", n, i, got[i],
						math.Float32bits(got[i]), generic[i], math.Float32bits(generic[i]))
				}
			}
		}
		if bad > 0 {
			t.Errorf("vec_dot n=%d: %d of %d rows differ from the generic reference", n, bad, rows)
			continue
		}
		t.Logf("vec_dot n=%d: %d rows (%d blocks) bit-identical with generic", n, rows, rows*rowBlocks)
		if rowBlocks == kRowBlocks {
			native, err := r.VecDot(typ, n, rows, w[:rows*ws], a[:rows*as], parity.Native)
			if err != nil {
				t.Fatal(err)
			}
			mag := termMagnitudes(t, typ, n, w[:rows*ws], a[:rows*as])
			t.Logf("vec_dot native vs k3: %s", relDiffSummary(got, native, mag))
		}
	}
}

// TestIQGridEveryIndex dequantizes, through the reference, blocks whose
// groups walk every index of each type's grid in every group position,
// with every sign pattern and scale, so a wrong table entry anywhere shows.
func TestIQGridEveryIndex(t *testing.T) {
	r := parity.Require(t)
	for _, typ := range iqGridTypes {
		t.Run(typ.String(), func(t *testing.T) {
			blocks := everyIndexBlocks(typ)
			checkDequantize(t, r, typ, blocks)
		})
	}
}

// everyIndexBlocks builds blocks in which group g of block b uses grid index
// (b*groups + g) mod gridSize, shifted per round so every index visits every
// group position; the other fields count up through all their values.
func everyIndexBlocks(typ quant.Type) []byte {
	gridSize := map[quant.Type]int{quant.IQ2_XXS: 256, quant.IQ2_XS: 512, quant.IQ2_S: 1024,
		quant.IQ3_XXS: 256, quant.IQ3_S: 512, quant.IQ1_S: 2048, quant.IQ1_M: 2048}[typ]
	groups := map[quant.Type]int{quant.IQ3_XXS: 64, quant.IQ3_S: 64}[typ] // 4-wide grids
	if groups == 0 {
		groups = 32
	}
	size := typ.TypeSize()
	nb := gridSize // gridSize blocks: index k lands in every position
	out := make([]byte, nb*size)
	for b := 0; b < nb; b++ {
		blk := out[b*size : (b+1)*size]
		for g := 0; g < groups; g++ {
			putGridIndex(typ, blk, g, (b+g*(gridSize/groups+1))%gridSize)
		}
		fillOther(typ, blk, b)
		setIQScale(blk, typ, quant.FP32ToFP16(float32(1+b%7)*0.375))
	}
	return out
}

// putGridIndex stores grid index k for group g (of 8 weights, or of 4 for
// the IQ3 types).
func putGridIndex(typ quant.Type, blk []byte, g, k int) {
	switch typ {
	case quant.IQ2_XXS:
		blk[2+8*(g/4)+g%4] = byte(k)
	case quant.IQ2_XS:
		q := binary.LittleEndian.Uint16(blk[2+2*g:])
		binary.LittleEndian.PutUint16(blk[2+2*g:], q&^511|uint16(k))
	case quant.IQ2_S:
		ib, l := g/4, g%4
		blk[2+g] = byte(k)
		blk[66+ib] = blk[66+ib]&^(3<<(2*l)) | byte(k>>8)<<(2*l)
	case quant.IQ3_XXS:
		blk[2+g] = byte(k)
	case quant.IQ3_S:
		// qs[8*ib+2*l+h] takes its ninth bit from qh[ib] bit 2*l+h.
		ib, bit := g/8, g%8
		blk[2+g] = byte(k)
		blk[66+ib] = blk[66+ib]&^(1<<bit) | byte(k>>8)<<bit
	case quant.IQ1_S:
		ib, l := g/4, g%4
		blk[2+g] = byte(k)
		qh := binary.LittleEndian.Uint16(blk[34+2*ib:])
		qh = qh&^(7<<(3*l)) | uint16(k>>8)<<(3*l)
		binary.LittleEndian.PutUint16(blk[34+2*ib:], qh)
	case quant.IQ1_M:
		blk[g] = byte(k)
		h := &blk[32+g/2]
		if g%2 == 0 {
			*h = *h&^0x07 | byte(k>>8)
		} else {
			*h = *h&^0x70 | byte(k>>8)<<4
		}
	}
}

// fillOther sets the sign, scale and delta fields of block b to values that
// cycle with b and the field's position.
func fillOther(typ quant.Type, blk []byte, b int) {
	v := func(i int) byte { return byte(b*37 + i*11) }
	switch typ {
	case quant.IQ2_XXS, quant.IQ3_XXS:
		off := 2 + 4 // IQ2_XXS: the second uint32 of each 8-byte group
		step := 8
		if typ == quant.IQ3_XXS {
			off, step = 66, 4
		}
		for ib := 0; ib < 8; ib++ {
			binary.LittleEndian.PutUint32(blk[off+step*ib:], uint32(b)*2654435761+uint32(ib)*40503)
		}
	case quant.IQ2_XS:
		for g := 0; g < 32; g++ {
			q := binary.LittleEndian.Uint16(blk[2+2*g:])
			binary.LittleEndian.PutUint16(blk[2+2*g:], q&511|uint16(v(g)&127)<<9)
		}
		for i := 66; i < 74; i++ {
			blk[i] = v(i)
		}
	case quant.IQ2_S:
		for i := 34; i < 66; i++ {
			blk[i] = v(i)
		}
		for i := 74; i < 82; i++ {
			blk[i] = v(i)
		}
	case quant.IQ3_S:
		for i := 74; i < 110; i++ {
			blk[i] = v(i)
		}
	case quant.IQ1_S:
		for ib := 0; ib < 8; ib++ {
			qh := binary.LittleEndian.Uint16(blk[34+2*ib:])
			binary.LittleEndian.PutUint16(blk[34+2*ib:], qh&0x0fff|uint16(v(ib)&15)<<12)
		}
	case quant.IQ1_M:
		for i := 32; i < 48; i++ {
			blk[i] = blk[i]&0x77 | v(i)&0x88
		}
		for i := 48; i < 56; i++ {
			blk[i] = v(i)
		}
	}
}
