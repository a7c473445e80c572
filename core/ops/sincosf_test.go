package ops

import (
	"math"
	"testing"
)

// glibcSinCos are (x, sinf(x), cosf(x)) as float32 bits from glibc 2.36 on
// x86-64 with FMA: arguments where glibc's result is not the correctly
// rounded one (so float32(math.Sin(float64(x))) would fail), then edges
// (tiny, |x| < π/4, the fast and the large reduction, huge).
var glibcSinCos = [][3]uint32{
	{0xc541c4e9, 0xbedc6c96, 0xbf670fad},
	{0x4440333f, 0x3f46d8b7, 0xbf213ba1},
	{0x4411f7f3, 0xbee43b1d, 0x3f65289a},
	{0x45144e34, 0xbf555a15, 0xbf0d7b3a},
	{0x44df799c, 0xbe6d820f, 0xbf7904d1},
	{0xc50f4f7e, 0x3ec4ba02, 0x3f6c593e},
	{0xc54359ef, 0xbe85864e, 0xbf772429},
	{0x444d0e14, 0xbe85beea, 0xbf771c81},
	{0xc490a60b, 0xbf621c99, 0x3ef01440},
	{0xc4bbc4be, 0xbee676bd, 0x3f649967},
	{0xc3cae3e1, 0x3efc1c9a, 0xbf5ed04b},
	{0xc563967f, 0x3e975d7f, 0xbf748e9a},
	{0xc5041c5c, 0xbefe223c, 0xbf5e3d17},
	{0xc421bd6d, 0x3e53c4d7, 0x3f7a773f},
	{0xc4221b93, 0xbf73f348, 0x3e9b3b64},
	{0x4438a2f0, 0xbe895e3c, 0xbf769d34},
	{0x4444cd88, 0x3f7882ff, 0xbe75dc10},
	{0x45184e92, 0xbf527b4d, 0x3f11b795},
	{0xc5358c57, 0xbf6ec8a5, 0xbeb896e5},
	{0xc4bd67bb, 0xbf569245, 0x3f0b9ffd},
	{0x00000000, 0x00000000, 0x3f800000},
	{0x80000000, 0x80000000, 0x3f800000},
	{0x3727c5ac, 0x3727c5ac, 0x3f800000},
	{0x3f000000, 0x3ef57744, 0x3f60a940},
	{0x3f48f5c3, 0x3f34f27f, 0x3f351765},
	{0x3f800000, 0x3f576aa4, 0x3f0a5140},
	{0xc0200000, 0xbf193578, 0xbf4d17bf},
	{0x42c80000, 0xbf01a12e, 0x3f5cc0ee},
	{0x42efcccd, 0x3efe2bff, 0x3f5e3a4d},
	{0x42f00000, 0x3f14a2ef, 0x3f506e2a},
	{0xc47a2000, 0xbf7eca46, 0x3dc6dffc},
	{0x477fe000, 0x3f79b240, 0xbe61d759},
	{0x60ad78ec, 0x3f281569, 0x3f411723},
	{0xff7fc99e, 0x3e79f163, 0x3f7841ca},
}

func TestSinfCosf(t *testing.T) {
	for _, c := range glibcSinCos {
		x := math.Float32frombits(c[0])
		if got := math.Float32bits(Sinf(x)); got != c[1] {
			t.Errorf("Sinf(%g) = %g, glibc %g", x, math.Float32frombits(got), math.Float32frombits(c[1]))
		}
		if got := math.Float32bits(Cosf(x)); got != c[2] {
			t.Errorf("Cosf(%g) = %g, glibc %g", x, math.Float32frombits(got), math.Float32frombits(c[2]))
		}
	}
	if !math.IsNaN(float64(Sinf(float32(math.Inf(1))))) || !math.IsNaN(float64(Cosf(float32(math.NaN())))) {
		t.Error("sin(inf) or cos(nan) is not NaN")
	}
}
