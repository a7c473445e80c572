package ops

import (
	"math"
	"testing"
)

// glibcCases are (x, expf(x), tanhf(x)) as float32 bits from glibc 2.36,
// picked where they differ from the correctly rounded results, plus edges.
var glibcCases = [][3]uint32{
	{0x3ea28190, 0x3fafd050, 0x3e9d42ae},
	{0x3ecfac60, 0x3fc00738, 0x3ec4fcb7},
	{0xbf0532e8, 0x3f182680, 0xbef4b43f},
	{0x3ea8d5b8, 0x3fb2001a, 0x3ea2f85c},
	{0x3f00d1e4, 0x3fd3b69a, 0x3eede443},
	{0xbee53d50, 0x3f239a6c, 0xbed70eb4},
	{0xbf10752c, 0x3f119a96, 0xbf02dada},
	{0x3ecffaa8, 0x3fc02497, 0x3ec53f63},
	{0xc1165b6c, 0x38adf357, 0xbf800000},
	{0x3ef1a950, 0x3fcd354e, 0x3ee12ebe},
	{0xc11c6bad, 0x386e2967, 0xbf800000},
	{0x41074ac0, 0x4592f03d, 0x3f7ffffe},
	{0x40c1430c, 0x43d1d3ec, 0x3f7fff41},
	{0x404cd378, 0x41c45714, 0x3f7f26c1},
	{0x406ff2ef, 0x4229f2e1, 0x3f7fb76e},
	{0xbf522300, 0x3ee14f69, 0xbf2cef8e},
	{0x00000000, 0x3f800000, 0x00000000},
	{0x80000000, 0x3f800000, 0x80000000},
	{0x3f800000, 0x402df854, 0x3f42f7d6},
	{0xbf800000, 0x3ebc5ab2, 0xbf42f7d6},
	{0x3e99999a, 0x3facc82d, 0x3e9526ed},
	{0xbe99999a, 0x3f3da643, 0xbe9526ed},
	{0x41c80000, 0x51861e9d, 0x3f800000},
	{0xc1c80000, 0x2d7451bd, 0xbf800000},
	{0x42b10000, 0x7f4cdcc4, 0x3f800000},
	{0xc2d00000, 0x00000000, 0xbf800000},
	{0x322bcc77, 0x3f800000, 0x322bcc77},
	{0xc2b40000, 0x0008ec28, 0xbf800000},
}

func TestLibm(t *testing.T) {
	for _, c := range glibcCases {
		x := math.Float32frombits(c[0])
		if got := math.Float32bits(Expf(x)); got != c[1] {
			t.Errorf("Expf(%g) = %g, glibc %g", x, math.Float32frombits(got), math.Float32frombits(c[1]))
		}
		if got := math.Float32bits(Tanhf(x)); got != c[2] {
			t.Errorf("Tanhf(%g) = %g, glibc %g", x, math.Float32frombits(got), math.Float32frombits(c[2]))
		}
	}
}

func TestVexp(t *testing.T) {
	for _, x := range []float32{-80, -20, -1, -0.1, 0, 0.1, 1, 20, 80} {
		want := math.Exp(float64(x))
		if d := math.Abs(float64(vexp(x))-want) / want; d > 3e-7 {
			t.Errorf("vexp(%g) = %g, want %g", x, vexp(x), want)
		}
	}
	if vexp(float32(math.Inf(-1))) != 0 || vexp(-200) != 0 {
		t.Error("vexp does not flush to zero")
	}
}

// glibcLog are (x, logf(x)) as float32 bits from glibc 2.36.
var glibcLog = [][2]uint32{
	{0x3f7c48a3, 0xbc6f9584},
	{0x3f84d73e, 0x3d180c45},
	{0x40b169f7, 0x3fdb3b62},
	{0x40ab4b5c, 0x3fd6bd28},
	{0x419a5ed5, 0x403d6f3a},
	{0x41cb8680, 0x404f2058},
	{0x41a45f41, 0x404173c5},
	{0x41e468aa, 0x4056822e},
	{0x41da1427, 0x40538bea},
	{0x407bd6ae, 0x3faf590e},
	{0x3f800000, 0x00000000},
	{0x40000000, 0x3f317218},
	{0x3f000000, 0xbf317218},
	{0x000116c2, 0xc2b834f2},
	{0x42c80000, 0x40935d8e},
	{0x3f800001, 0x33ffffff},
}

func TestLogf(t *testing.T) {
	for _, c := range glibcLog {
		x := math.Float32frombits(c[0])
		if got := math.Float32bits(Logf(x)); got != c[1] {
			t.Errorf("Logf(%g) = %g, glibc %g", x, math.Float32frombits(got), math.Float32frombits(c[1]))
		}
	}
	if !math.IsInf(float64(Logf(0)), -1) || !math.IsNaN(float64(Logf(-1))) {
		t.Error("Logf edge cases")
	}
}
