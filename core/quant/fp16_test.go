package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// halfValue decodes binary16 from first principles, independent of the bit
// tricks in FP16ToFP32.
func halfValue(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1F
	man := float64(h & 0x3FF)
	switch exp {
	case 0:
		return sign * math.Ldexp(man, -24)
	case 31:
		if man != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+man, exp-25)
}

func TestFP16ToFP32Exhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got := FP16ToFP32(uint16(h))
		want := halfValue(uint16(h))
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("FP16ToFP32(%#04x) = %v, want NaN", h, got)
			}
			if back := FP32ToFP16(got); back != 0x7E00|uint16(h)&0x8000 {
				t.Fatalf("FP32ToFP16(NaN from %#04x) = %#04x, want canonical quiet NaN", h, back)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != (h&0x8000 != 0) {
			t.Fatalf("FP16ToFP32(%#04x) = %v, want %v", h, got, want)
		}
		if back := FP32ToFP16(got); back != uint16(h) {
			t.Fatalf("FP32ToFP16(FP16ToFP32(%#04x)) = %#04x", h, back)
		}
	}
}

func TestFP32ToFP16Rounding(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		want uint16
	}{
		{"zero", 0, 0x0000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000},
		{"one", 1, 0x3C00},
		{"tie to even down", 1 + 0x1p-11, 0x3C00},
		{"tie to even up", 1 + 3*0x1p-11, 0x3C02},
		{"max half", 65504, 0x7BFF},
		{"just below overflow tie", 65519.996, 0x7BFF},
		{"overflow tie rounds to inf", 65520, 0x7C00},
		{"large", 1e10, 0x7C00},
		{"negative large", -1e10, 0xFC00},
		{"inf", float32(math.Inf(1)), 0x7C00},
		{"smallest subnormal", 0x1p-24, 0x0001},
		{"half smallest subnormal ties to zero", 0x1p-25, 0x0000},
		{"above half smallest subnormal", 0x1.8p-25, 0x0001},
		{"three halves subnormal ties to even", 0x1.8p-24, 0x0002},
		{"largest subnormal", 0x3FFp-24, 0x03FF},
		{"smallest normal", 0x1p-14, 0x0400},
		{"float32 subnormal", 1e-40, 0x0000},
		{"nan", float32(math.NaN()), 0x7E00},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FP32ToFP16(tt.in); got != tt.want {
				t.Errorf("FP32ToFP16(%g) = %#04x, want %#04x", tt.in, got, tt.want)
			}
		})
	}
}

// TestFP32ToFP16Nearest checks on random float32 bit patterns that the
// result is a nearest half, and the even one on ties.
func TestFP32ToFP16Nearest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		// Exponents around the half range, where rounding is interesting.
		bits := rng.Uint32()&0x807FFFFF | uint32(96+rng.IntN(48))<<23
		f := math.Float32frombits(bits)
		h := FP32ToFP16(f)
		got := halfValue(h)
		err := math.Abs(got - float64(f))
		for _, nb := range []uint16{h - 1, h + 1} {
			if nb&0x7FFF >= 0x7C00 || (nb^h)&0x8000 != 0 {
				continue // wrapped into inf/NaN or across the sign
			}
			ne := math.Abs(halfValue(nb) - float64(f))
			if ne < err || (ne == err && nb&1 == 0) {
				if !math.IsInf(got, 0) {
					t.Fatalf("FP32ToFP16(%g) = %#04x (%g), but %#04x (%g) is nearer or the even tie", f, h, got, nb, halfValue(nb))
				}
			}
		}
	}
}

func TestBF16(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := BF16ToFP32(uint16(h))
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToFP32(%#04x) bits = %#08x", h, math.Float32bits(f))
		}
		back := FP32ToBF16(f)
		if math.IsNaN(float64(f)) {
			if back != uint16(h)|64 {
				t.Fatalf("FP32ToBF16(NaN %#04x) = %#04x, want quieted %#04x", h, back, h|64)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("FP32ToBF16(BF16ToFP32(%#04x)) = %#04x", h, back)
		}
	}
	tests := []struct {
		name string
		in   uint32
		want uint16
	}{
		{"tie to even down", 0x3F808000, 0x3F80},
		{"tie to even up", 0x3F818000, 0x3F82},
		{"above tie", 0x3F808001, 0x3F81},
		{"below tie", 0x3F807FFF, 0x3F80},
		{"overflow to inf", 0x7F7FFFFF, 0x7F80},
		{"subnormal kept", 0x00018000, 0x0002},
		{"signalling nan quieted", 0x7F800001, 0x7FC0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FP32ToBF16(math.Float32frombits(tt.in)); got != tt.want {
				t.Errorf("FP32ToBF16(%#08x) = %#04x, want %#04x", tt.in, got, tt.want)
			}
		})
	}
}

func TestE8M0(t *testing.T) {
	tests := []struct {
		x          uint8
		full, half float32
	}{
		{0, 0x1p-127, 0x1p-128},
		{1, 0x1p-126, 0x1p-127},
		{2, 0x1p-125, 0x1p-126},
		{127, 1, 0.5},
		{128, 2, 1},
		{254, 0x1p127, 0x1p126},
	}
	for _, tt := range tests {
		if got := E8M0ToFP32(tt.x); got != tt.full {
			t.Errorf("E8M0ToFP32(%d) = %g, want %g", tt.x, got, tt.full)
		}
		if got := E8M0ToFP32Half(tt.x); got != tt.half {
			t.Errorf("E8M0ToFP32Half(%d) = %g, want %g", tt.x, got, tt.half)
		}
	}
}

func TestNearestInt(t *testing.T) {
	tests := []struct {
		in   float32
		want int
	}{
		{0, 0}, {0.49, 0}, {0.5, 0}, {1.5, 2}, {2.5, 2}, {3.5, 4},
		{-0.5, 0}, {-1.5, -2}, {-2.5, -2}, {-2.51, -3}, {7.9, 8},
		{4194303, 4194303}, {-4194303, -4194303},
	}
	for _, tt := range tests {
		if got := nearestInt(tt.in); got != tt.want {
			t.Errorf("nearestInt(%g) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestCvttAndRoundf(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		in   float32
		want int32
	}{
		{1.9, 1}, {-1.9, -1}, {2147483520, 2147483520}, {-2147483648, math.MinInt32},
		{2147483648, math.MinInt32}, {-2147483904, math.MinInt32},
		{inf, math.MinInt32}, {-inf, math.MinInt32}, {float32(math.NaN()), math.MinInt32},
	}
	for _, tt := range tests {
		if got := cvtt(tt.in); got != tt.want {
			t.Errorf("cvtt(%g) = %d, want %d", tt.in, got, tt.want)
		}
	}
	for in, want := range map[float32]float32{0.5: 1, -0.5: -1, 1.5: 2, 2.5: 3, -2.5: -3, 2.49: 2} {
		if got := roundf(in); got != want {
			t.Errorf("roundf(%g) = %g, want %g", in, got, want)
		}
	}
}
