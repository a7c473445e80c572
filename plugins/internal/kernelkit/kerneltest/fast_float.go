package kerneltest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// Float mode fast (kernelkit/fastfloat.go) trades bit-identity with the
// reference for speed on F32, F16 and BF16 weights, but not determinism: every
// level returns kernelkit.FastFloatRef's float bit for bit, and that stays
// within 2^-21·Σ|products| (+ half an ulp of the final float32 rounding)
// of the reference.

// fastRows are special rows for the fast kernels: every product the same
// sign, cancelling pairs, zeros of both signs, float32-subnormal products
// (F32: and weights), huge values that overflow float32 in a lane.
func fastRows(r *rand.Rand, typ quant.Type, n int) map[string][2][]byte {
	row := func(f func(i int) float32) []byte {
		v := make([]float32, n)
		for i := range v {
			v[i] = f(i)
		}
		return encodeFloats(typ, v)
	}
	gauss := func(int) float32 { return float32(r.NormFloat64()) }
	const chunk = 64 // kernelkit's fastChunk
	var chunkW, chunkA [4 * chunk]float32
	for i := range chunkW {
		scale := math.Pow(2, float64(13-26*(i/chunk%2)))
		chunkW[i], chunkA[i] = float32(r.NormFloat64()*scale), float32(r.NormFloat64()*scale)
		if i/chunk == 2 {
			chunkW[i], chunkA[i] = -chunkW[i-2*chunk], chunkA[i-2*chunk]
		}
	}
	octaves := func(int) float32 { return float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(20)-10))) }
	rows := map[string][2][]byte{
		"random":    {randWeights(r, typ, n), randActs(r, typ, n)},
		"octaves":   {row(octaves), row(octaves)},
		"positive":  {row(func(int) float32 { return float32(1 + r.Float64()) }), row(func(int) float32 { return float32(r.Float64()) })},
		"cancel":    {row(func(i int) float32 { return float32(1 - 2*(i%2)) }), row(func(i int) float32 { return 1 + float32(i/2%7)/8 })},
		"zeros":     {row(func(int) float32 { return 0 }), row(gauss)},
		"neg-zeros": {row(func(int) float32 { return float32(math.Copysign(0, -1)) }), row(gauss)},
		// Chunks of 64 alternately large and small (products 2^±26), the
		// third chunk of each four the first negated: the large lanes
		// cancel, what the small ones kept of their bits is the result, so
		// the order of the chunks' float64 adds shows.
		"chunk-cancel": {row(func(i int) float32 { return chunkW[i%len(chunkW)] }), row(func(i int) float32 { return chunkA[i%len(chunkA)] })},
	}
	switch typ {
	case quant.F32:
		// Full 24-bit products: the fused adds' single rounding shows.
		rows["subnormal"] = [2][]byte{row(func(int) float32 { return float32(r.NormFloat64()) * 0x1p-70 }), row(func(int) float32 { return float32(r.NormFloat64()) * 0x1p-60 })}
		rows["subnormal-weights"] = [2][]byte{row(func(int) float32 { return float32(r.NormFloat64()) * 0x1p-135 }), row(func(int) float32 { return float32(r.NormFloat64()) * 0x1p10 })}
		rows["overflow"] = [2][]byte{row(func(i int) float32 { return 0x1p100 * float32(1+i%3) }), row(func(i int) float32 { return 0x1p26 * float32(1-2*(i%5/4)) })}
		rows["f32-max"] = [2][]byte{row(func(i int) float32 { return math.MaxFloat32 * float32(1-2*(i%2)) }), row(func(int) float32 { return 1 })}
	case quant.BF16:
		rows["subnormal"] = [2][]byte{row(func(int) float32 { return float32(r.NormFloat64()) * 0x1p-70 }), row(func(int) float32 { return float32(r.NormFloat64()) * 0x1p-60 })}
		rows["overflow"] = [2][]byte{row(func(i int) float32 { return 0x1p100 * float32(1+i%3) }), row(func(i int) float32 { return 0x1p30 * float32(1-2*(i%5/4)) })}
	default:
		rows["f16-range"] = [2][]byte{row(func(i int) float32 { return 65504 * float32(1-2*(i%2)) }), row(func(int) float32 { return 65504 })}
		rows["subnormal"] = [2][]byte{row(func(int) float32 { return float32(r.NormFloat64()) * 0x1p-20 }), row(gauss)}
	}
	return rows
}

// FastFloat checks float mode fast on every level: Dot, MatVec (whole
// groups of eight rows and single rows) and MatMul (1-6 activation rows)
// against kernelkit.FastFloatRef, bit for bit, on lengths with and
// without a tail past the last 64 elements.
func FastFloat(t *testing.T, k *kernelkit.Kit) {
	defer k.SetFloatMode("exact")
	if err := k.SetFloatMode("fast"); err != nil {
		t.Fatal(err)
	}
	if err := k.SetFloatMode("sloppy"); err == nil {
		t.Error("SetFloatMode accepted an unknown mode")
	}
	if err := k.SetFloatMode("fast"); err != nil || k.FloatMode() != "fast" {
		t.Fatalf("SetFloatMode(fast): %v, mode %s", err, k.FloatMode())
	}
	forEachLevel(t, k, func(t *testing.T) {
		for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
			r := rand.New(rand.NewPCG(31, uint64(typ)))
			es := typ.TypeSize()
			// 5·64+3: whole unrolled steps of 2 or 4 chunks, a chunk
			// after them, and a tail.
			for _, n := range []int{1, 37, 64, 100, 128, 5*64 + 3, 320, 4096, 7168 + 64 + 5} {
				for name, wa := range fastRows(r, typ, n) {
					w, a := wa[0], wa[1]
					want := kernelkit.FastFloatRef(typ, n, w, a)
					got, err := k.Dot(typ, n, w, a)
					if err != nil {
						t.Fatal(err)
					}
					if !sameFloat(got, want) {
						t.Fatalf("%s n=%d %s: Dot %g (%#x), FastFloatRef %g (%#x)", typ, n, name, got, math.Float32bits(got), want, math.Float32bits(want))
					}
				}
				// 17 rows: two groups of eight and a single row; 6
				// activation rows.
				const rows, m = 17, 6
				w := make([]byte, 0, rows*es*n)
				for range rows {
					w = append(w, randWeights(r, typ, n)...)
				}
				acts := make([]byte, 0, m*es*n)
				for range m {
					acts = append(acts, randActs(r, typ, n)...)
				}
				for _, mm := range []int{1, 2, 5, m} {
					out := make([]float32, mm*rows)
					if err := k.MatMul(typ, w, rows, n, acts, mm, out, 2); err != nil {
						t.Fatal(err)
					}
					for j := range mm {
						for i := range rows {
							want := kernelkit.FastFloatRef(typ, n, w[i*es*n:(i+1)*es*n], acts[j*es*n:(j+1)*es*n])
							if got := out[j*rows+i]; !sameFloat(got, want) {
								t.Fatalf("%s n=%d m=%d: MatMul row %d act %d = %g, FastFloatRef %g", typ, n, mm, i, j, got, want)
							}
						}
					}
				}
			}
		}
	})
}

// FastFloatAccuracy bounds float mode fast's distance to the reference on
// 100k random rows per type (gaussian and 20-octave values, lengths 64 to
// 1500 with tails): |fast - exact| <= 2^-21·Σ|w·a| + ulp(exact)/2 and
// below 1e-6 of Σ|w·a| — the 1e-6 relative, measured against the
// magnitude every summation order errs in proportion to (a cancelling
// sum's own relative error is unbounded for any order).
func FastFloatAccuracy(t *testing.T, k *kernelkit.Kit) {
	defer k.SetFloatMode("exact")
	if err := k.SetFloatMode("fast"); err != nil {
		t.Fatal(err)
	}
	rowsPer := 100_000
	if testing.Short() {
		rowsPer = 10_000
	}
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16} {
		r := rand.New(rand.NewPCG(77, uint64(typ)))
		es := typ.TypeSize()
		var worst, worstRel float64
		done := 0
		for _, n := range []int{64, 100, 256, 1500} {
			rows := rowsPer / 4
			w := make([]byte, 0, rows*es*n)
			for i := range rows {
				if i%2 == 0 {
					w = append(w, randWeights(r, typ, n)...)
				} else {
					v := make([]float32, n)
					for j := range v {
						v[j] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(20)-10)))
					}
					w = append(w, encodeFloats(typ, v)...)
				}
			}
			a := randActs(r, typ, n)
			out := make([]float32, rows)
			if err := k.MatVec(typ, w, rows, n, a, out, 2); err != nil {
				t.Fatal(err)
			}
			for i := range rows {
				wr := w[i*es*n : (i+1)*es*n]
				exact, err := quant.VecDot(typ, n, wr, a)
				if err != nil {
					t.Fatal(err)
				}
				var abs float64
				for j := range n {
					abs += math.Abs(float64(fl(typ, wr, j)) * float64(fl(typ, a, j)))
				}
				d := math.Abs(float64(out[i]) - float64(exact))
				ulp := float64(math.Nextafter32(float32(math.Abs(float64(exact))), float32(math.Inf(1)))) - math.Abs(float64(exact))
				if d > 0x1p-21*abs+ulp/2 || d > 1e-6*abs {
					t.Fatalf("%s n=%d row %d: fast %g, exact %g: |diff| %g over 2^-21·Σ|p| = %g (+ulp/2 %g)", typ, n, i, out[i], exact, d, 0x1p-21*abs, ulp/2)
				}
				if abs > 0 {
					worst = max(worst, d/abs)
				}
				if exact != 0 {
					worstRel = max(worstRel, d/math.Abs(float64(exact)))
				}
				if got := kernelkit.FastFloatRef(typ, n, wr, a); i%97 == 0 && !sameFloat(got, out[i]) {
					t.Fatalf("%s n=%d row %d: MatVec %g, FastFloatRef %g", typ, n, i, out[i], got)
				}
			}
			done += rows
		}
		t.Logf("%s on %s: %d rows, max |fast-exact|/Σ|p| = %.3g (2^%.1f), max relative to |exact| = %.3g",
			typ, k.Level(), done, worst, math.Log2(worst), worstRel)
	}
}

// fl is element i of an F32, F16 or BF16 row.
func fl(typ quant.Type, b []byte, i int) float32 {
	if typ == quant.F32 {
		return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	h := binary.LittleEndian.Uint16(b[2*i:])
	if typ == quant.F16 {
		return quant.FP16ToFP32(h)
	}
	return quant.BF16ToFP32(h)
}
