package quant_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// kMaxElemErr bounds |y-x| / max|x| over a super-block for the edge shapes
// whose scales stay in fp16's normal range. Q8_K's is its half step.
var kMaxElemErr = map[quant.Type]float64{
	quant.Q2_K: 0.40,
	quant.Q3_K: 0.25,
	quant.Q4_K: 0.08,
	quant.Q5_K: 0.04,
	quant.Q6_K: 0.03,
	quant.Q8_K: 0.5 / 127 * 1.001,
}

func TestKEdgeShapes(t *testing.T) {
	for si, shape := range kEdgeShapes {
		x := make([]float32, quant.QK_K)
		amax := 0.0
		for j := range x {
			x[j] = float32(shape(j))
			amax = max(amax, math.Abs(float64(x[j])))
		}
		if math.IsNaN(amax) || math.IsInf(amax, 0) {
			continue // no accuracy to expect; the parity test covers them
		}
		for _, typ := range kAllTypes {
			t.Run(typ.String(), func(t *testing.T) {
				q := kQuantize(t, typ, x)
				y := kDequantize(t, typ, q)
				var worst float64
				for i := range y {
					worst = max(worst, math.Abs(float64(y[i])-float64(x[i])))
				}
				switch {
				case amax == 0:
					for i, b := range q {
						if b != 0 {
							t.Fatalf("shape %d (zeros): byte %d = %#x, want an all-zero block", si, i, b)
						}
					}
				case amax < 1e-5:
					// The fp16 scales are subnormal or zero. Only Q8_K (a
					// float32 scale) stays accurate, until -127/max overflows
					// float32 below 127/MaxFloat32; the rest must stay finite.
					if typ == quant.Q8_K && amax > 1e-36 && worst > kMaxElemErr[typ]*amax {
						t.Errorf("shape %d (max %g): max error %g", si, amax, worst)
					}
					if math.IsNaN(worst) || math.IsInf(worst, 0) {
						t.Errorf("shape %d (max %g): non-finite output", si, amax)
					}
				case amax > 1e6:
					// d or dmin overflows fp16 for every type but Q6_K and
					// Q8_K (ggml gives the same Inf/NaN; see the parity test).
					if (typ == quant.Q6_K || typ == quant.Q8_K) && !(worst <= kMaxElemErr[typ]*amax) {
						t.Errorf("shape %d (max %g): max error %g", si, amax, worst)
					}
				default:
					if !(worst <= kMaxElemErr[typ]*amax) {
						t.Errorf("shape %d (max %g): max error %g, want <= %g", si, amax, worst, kMaxElemErr[typ]*amax)
					}
				}
			})
		}
	}
}

// TestKVecDotMatchesDequantized checks each dot product against the sum of
// products of the dequantized rows, in float64.
func TestKVecDotMatchesDequantized(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	const blocks = 8
	n := blocks * quant.QK_K
	xa := kCases()[0].gen(rng, blocks)
	act := kQuantize(t, quant.Q8_K, xa)
	av := kDequantize(t, quant.Q8_K, act)
	for _, typ := range kTypes {
		for _, src := range []string{"quantized", "raw"} {
			t.Run(typ.String()+"/"+src, func(t *testing.T) {
				var w []byte
				if src == "raw" {
					w = rawBlocks(rng, typ, blocks)
				} else {
					w = kQuantize(t, typ, kCases()[2].gen(rng, blocks))
				}
				wv := kDequantize(t, typ, w)
				var want, mag float64
				for i := range wv {
					want += float64(wv[i]) * float64(av[i])
					mag += math.Abs(float64(wv[i]) * float64(av[i]))
				}
				got, err := quant.VecDot(typ, n, w, act)
				if err != nil {
					t.Fatal(err)
				}
				if d := math.Abs(float64(got) - want); d > 1e-5*mag {
					t.Errorf("vec_dot = %g, dequantized dot = %g (|diff| %g, sum |terms| %g)", got, want, d, mag)
				}
			})
		}
	}
}

func TestQ8KQuantize(t *testing.T) {
	tests := []struct {
		name string
		x    func(j int) float32
	}{
		{"positive max", func(j int) float32 { return float32(j%17) - 5 }},
		{"negative max", func(j int) float32 { return 5 - float32(j%17) }},
		{"tie keeps the first", func(j int) float32 { return float32(1 - 2*(j%2)) }},
		{"zeros", func(j int) float32 { return 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := make([]float32, quant.QK_K)
			var mx, amax float32
			for j := range x {
				x[j] = tt.x(j)
				if a := float32(math.Abs(float64(x[j]))); a > amax {
					amax, mx = a, x[j]
				}
			}
			q := kQuantize(t, quant.Q8_K, x)
			d := math.Float32frombits(binary.LittleEndian.Uint32(q))
			if amax == 0 {
				if d != 0 {
					t.Errorf("d = %g for a zero block", d)
				}
			} else if want := 1 / (-127 / mx); d != want {
				t.Errorf("d = %g, want 1/(-127/%g) = %g", d, mx, want)
			}
			for j := 0; j < quant.QK_K; j++ {
				v := int8(q[4+j])
				if x[j] == mx && amax != 0 && v != -127 {
					t.Errorf("element %d = max %g quantized to %d, want -127", j, mx, v)
				}
			}
			for g := 0; g < 16; g++ {
				sum := 0
				for j := 16 * g; j < 16*g+16; j++ {
					sum += int(int8(q[4+j]))
				}
				if got := int16(binary.LittleEndian.Uint16(q[4+quant.QK_K+2*g:])); int(got) != sum {
					t.Errorf("bsums[%d] = %d, sum of its quants %d", g, got, sum)
				}
			}
		})
	}
}

func TestKSizeErrors(t *testing.T) {
	for _, typ := range kAllTypes {
		t.Run(typ.String(), func(t *testing.T) {
			if err := quant.Quantize(typ, make([]float32, 100), make([]byte, 1000)); err == nil {
				t.Error("quantize of 100 elements: no error")
			}
			if err := quant.Quantize(typ, make([]float32, 512), make([]byte, 2*typ.TypeSize()-1)); err == nil {
				t.Error("quantize into a short buffer: no error")
			}
			if err := quant.Dequantize(typ, make([]byte, typ.TypeSize()), make([]float32, 512)); err == nil {
				t.Error("dequantize from a short buffer: no error")
			}
			if typ == quant.Q8_K {
				if _, err := quant.VecDot(typ, 256, make([]byte, 292), make([]byte, 292)); err == nil || quant.CanVecDot(typ) {
					t.Error("q8_K vec_dot: ggml has none, k3 must refuse it")
				}
				return
			}
			if _, err := quant.VecDot(typ, 512, make([]byte, 2*typ.TypeSize()), make([]byte, 292)); err == nil {
				t.Error("vec_dot with short activations: no error")
			}
		})
	}
}

// FuzzKQuantize feeds arbitrary float32 bit patterns (NaN, Inf and
// subnormals included) to every K-quant: nothing may panic, and the output
// must not depend on what the destination buffer held before.
func FuzzKQuantize(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add(binary.LittleEndian.AppendUint32(nil, math.Float32bits(-3.5)))
	f.Fuzz(func(t *testing.T, data []byte) {
		x := make([]float32, quant.QK_K*(1+len(data)/(4*quant.QK_K)))
		for i := 0; 4*i+4 <= len(data); i++ {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		act := kQuantize(t, quant.Q8_K, x)
		for _, typ := range kAllTypes {
			clean := kQuantize(t, typ, x)
			dirty := fill(len(clean), 0xA5)
			if err := quant.Quantize(typ, x, dirty); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(clean, dirty) {
				t.Fatalf("%s: quantizing into a used buffer gives different bytes", typ)
			}
			kDequantize(t, typ, clean)
			if quant.CanVecDot(typ) {
				if _, err := quant.VecDot(typ, len(x), clean, act); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
