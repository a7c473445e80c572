package quant_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/quant"
)

// Self-tests of the K-quants that need no reference: hand-made blocks,
// round-trip error, edge cases, dot products against dequantized values.

var kAllTypes = []quant.Type{quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q8_K}

func kQuantize(t *testing.T, typ quant.Type, x []float32) []byte {
	t.Helper()
	q := make([]byte, len(x)/quant.QK_K*typ.TypeSize())
	if err := quant.Quantize(typ, x, q); err != nil {
		t.Fatal(err)
	}
	return q
}

func kDequantize(t *testing.T, typ quant.Type, q []byte) []float32 {
	t.Helper()
	y := make([]float32, len(q)/typ.TypeSize()*quant.QK_K)
	if err := quant.Dequantize(typ, q, y); err != nil {
		t.Fatal(err)
	}
	return y
}

func half(f float32) []byte { return binary.LittleEndian.AppendUint16(nil, quant.FP32ToFP16(f)) }

func fill(n int, b byte) []byte {
	s := make([]byte, n)
	for i := range s {
		s[i] = b
	}
	return s
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// kKnownBlocks are blocks built by hand from the layouts in ggml-common.h,
// with the values they must decode to.
func kKnownBlocks() []struct {
	name string
	typ  quant.Type
	blk  []byte
	want func(e int) float32
} {
	q8 := binary.LittleEndian.AppendUint32(nil, math.Float32bits(0.5))
	for i := 0; i < quant.QK_K; i++ {
		q8 = append(q8, byte(int8(i-128)))
	}
	q8 = append(q8, make([]byte, 32)...)
	q6Scales := make([]byte, 16)
	for s := range q6Scales {
		q6Scales[s] = byte(int8(s - 8))
	}
	// 0xE4 packs 0,1,2,3 at shifts 0,2,4,6; 0x5A is nibbles 10 (low), 5 (high).
	crumb := func(e int) float32 { return float32(e % 128 / 32) }
	nib := func(e int) float32 { return float32(10 - 5*(e%64/32)) }
	return []struct {
		name string
		typ  quant.Type
		blk  []byte
		want func(e int) float32
	}{
		{"q2_K sc=1 m=2", quant.Q2_K, cat(fill(16, 0x21), fill(64, 0xE4), half(1), half(1)),
			func(e int) float32 { return crumb(e) - 2 }},
		{"q3_K high bits set", quant.Q3_K, cat(fill(32, 0xFF), fill(64, 0xE4), fill(8, 0x11), fill(4, 0xAA), half(0.5)),
			func(e int) float32 { return 0.5 * crumb(e) }},
		{"q3_K high bits clear", quant.Q3_K, cat(fill(32, 0), fill(64, 0xE4), fill(8, 0x11), fill(4, 0xAA), half(0.5)),
			func(e int) float32 { return 0.5 * (crumb(e) - 4) }},
		{"q4_K", quant.Q4_K, cat(half(2), half(1), fill(4, 1), fill(4, 3), fill(4, 0x21), fill(128, 0x5A)),
			func(e int) float32 { return 2*nib(e) - float32(3-e/128) }},
		{"q5_K all high bits", quant.Q5_K, cat(half(2), half(1), fill(4, 1), fill(4, 3), fill(4, 0x21), fill(32, 0xFF), fill(128, 0x5A)),
			func(e int) float32 { return 2*(nib(e)+16) - float32(3-e/128) }},
		{"q5_K low-nibble high bits", quant.Q5_K, cat(half(2), half(1), fill(4, 1), fill(4, 3), fill(4, 0x21), fill(32, 0x55), fill(128, 0x5A)),
			func(e int) float32 { return 2*(nib(e)+16*float32(1-e%64/32)) - float32(3-e/128) }},
		{"q6_K", quant.Q6_K, cat(fill(128, 0), fill(64, 0xFF), q6Scales, half(0.25)),
			func(e int) float32 { return 0.25 * float32(e/16-8) * 16 }},
		{"q8_K", quant.Q8_K, q8, func(e int) float32 { return 0.5 * float32(e-128) }},
	}
}

func TestKKnownBlocks(t *testing.T) {
	ones := binary.LittleEndian.AppendUint32(nil, math.Float32bits(1))
	ones = append(ones, fill(quant.QK_K, 1)...)
	for range quant.QK_K / 16 {
		ones = binary.LittleEndian.AppendUint16(ones, 16)
	}
	for _, tt := range kKnownBlocks() {
		t.Run(tt.name, func(t *testing.T) {
			if len(tt.blk) != tt.typ.TypeSize() {
				t.Fatalf("test block is %d bytes, %s needs %d", len(tt.blk), tt.typ, tt.typ.TypeSize())
			}
			want := make([]float32, quant.QK_K)
			sum := 0.0
			for e := range want {
				want[e] = tt.want(e)
				sum += float64(want[e])
			}
			if diff := cmp.Diff(want, kDequantize(t, tt.typ, tt.blk)); diff != "" {
				t.Errorf("dequantize (-want +got):\n%s", diff)
			}
			if !quant.CanVecDot(tt.typ) {
				return
			}
			// Against activations that are all 1, the dot product is the
			// sum of the (small integer) values, exactly.
			got, err := quant.VecDot(tt.typ, quant.QK_K, tt.blk, ones)
			if err != nil {
				t.Fatal(err)
			}
			if float64(got) != sum {
				t.Errorf("vec_dot with ones = %g, want %g", got, sum)
			}
		})
	}
}

// kErrBounds are the relative RMS errors a round trip must stay under for
// ordinary data: over a whole family, and for its worst super-block. They
// are what the reference algorithms achieve here, plus about 10%.
var kErrBounds = map[quant.Type]struct{ all, block float64 }{
	quant.Q2_K: {0.33, 0.50},
	quant.Q3_K: {0.20, 0.245},
	quant.Q4_K: {0.083, 0.117},
	quant.Q5_K: {0.045, 0.068},
	quant.Q6_K: {0.023, 0.034},
	quant.Q8_K: {0.013, 0.023},
}

func TestKRoundTripError(t *testing.T) {
	ordinary := map[string]bool{"gaussian": true, "uniform": true, "group-scaled": true, "positive": true, "negative": true}
	for _, c := range kCases() {
		if !ordinary[c.name] {
			continue
		}
		x := c.gen(rand.New(rand.NewPCG(7, 7)), 200)
		for _, typ := range kAllTypes {
			t.Run(c.name+"/"+typ.String(), func(t *testing.T) {
				y := kDequantize(t, typ, kQuantize(t, typ, x))
				var se, ss, worst float64
				for b := 0; b < len(x); b += quant.QK_K {
					bse, bss := sqErr(x[b:b+quant.QK_K], y[b:b+quant.QK_K])
					se, ss = se+bse, ss+bss
					worst = max(worst, math.Sqrt(bse/bss))
				}
				lim := kErrBounds[typ]
				if all := math.Sqrt(se / ss); all > lim.all || worst > lim.block {
					t.Errorf("relative RMS error %.4f (worst block %.4f), want <= %g (%g)", all, worst, lim.all, lim.block)
				}
			})
		}
	}
}

func sqErr(x, y []float32) (se, ss float64) {
	for i := range x {
		d := float64(y[i]) - float64(x[i])
		se += d * d
		ss += float64(x[i]) * float64(x[i])
	}
	return se, ss
}

// TestKMoreBitsLessError checks that the types order by accuracy.
func TestKMoreBitsLessError(t *testing.T) {
	x := kCases()[0].gen(rand.New(rand.NewPCG(8, 8)), 64)
	prev := math.Inf(1)
	for _, typ := range kAllTypes {
		se, ss := sqErr(x, kDequantize(t, typ, kQuantize(t, typ, x)))
		if e := math.Sqrt(se / ss); e >= prev {
			t.Errorf("%s: relative error %.4f, not below the previous type's %.4f", typ, e, prev)
		} else {
			prev = e
		}
	}
}
