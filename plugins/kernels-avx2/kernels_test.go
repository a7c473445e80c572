package kernelsavx2

// This file is kept identical (but for the package clause) in
// plugins/kernels-avx2 and plugins/kernels-avx512.

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/quant"
)

// kernelTypes are the weight types with a SIMD kernel in some level.
var kernelTypes = []quant.Type{quant.Q2_K, quant.Q3_K, quant.Q6_K, quant.Q4_K, quant.Q5_K, quant.Q8_0, quant.Q4_0,
	quant.Q5_0, quant.MXFP4, quant.F32, quant.F16, quant.BF16}

// forEachLevel runs f under every level this machine supports.
func forEachLevel(t *testing.T, f func(t *testing.T)) {
	defer func(l *level) { active = l }(active)
	for _, name := range Levels() {
		if err := SetLevel(name); err != nil {
			t.Fatal(err)
		}
		t.Run(name, f)
	}
}

func TestLevels(t *testing.T) {
	names := Levels()
	if names[0] != "generic" {
		t.Fatalf("Levels()[0] = %q, want generic", names[0])
	}
	if got := Level(); !slices.Contains(names, got) || (len(names) > 1 && got == "generic") {
		t.Errorf("Level() = %q: want a SIMD level of %v", got, names)
	}
	if err := SetLevel("no-such-level"); err == nil {
		t.Error("SetLevel accepted an unknown level")
	}
	t.Logf("levels on this machine: %v", names)
}

// randHalf returns a finite fp16 of random sign with magnitude in
// [2^lo, 2^hi).
func randHalf(r *rand.Rand, lo, hi float64) uint16 {
	e := lo + r.Float64()*(hi-lo)
	v := float32(math.Pow(2, e))
	if r.IntN(2) == 0 {
		v = -v
	}
	return quant.FP32ToFP16(v)
}

// halfFields are the byte offsets of each block type's fp16 scales.
var halfFields = map[quant.Type][]int{
	quant.Q2_K: {80, 82}, quant.Q3_K: {108}, quant.Q4_K: {0, 2}, quant.Q5_K: {0, 2},
	quant.Q6_K: {208}, quant.Q8_0: {0}, quant.Q4_0: {0}, quant.Q5_0: {0},
}

// quantRanges are the byte ranges of each block type's quant bits: zeroing
// them leaves only the block's offset/minimum part.
var quantRanges = map[quant.Type][][2]int{
	quant.Q2_K: {{16, 80}}, quant.Q3_K: {{0, 96}}, quant.Q4_K: {{16, 144}}, quant.Q5_K: {{16, 176}},
	quant.Q6_K: {{0, 192}}, quant.Q8_0: {{2, 34}}, quant.Q4_0: {{2, 18}},
	quant.Q5_0: {{2, 22}}, quant.MXFP4: {{1, 17}},
}

// randWeights fills a row of n elements of t with random bytes and sane
// scales.
func randWeights(r *rand.Rand, t quant.Type, n int) []byte {
	size, _ := quant.RowSize(t, int64(n))
	w := make([]byte, size)
	switch t {
	case quant.F32:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(float32(r.NormFloat64())))
		}
		return w
	case quant.F16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(w[2*i:], randHalf(r, -8, 4))
		}
		return w
	case quant.BF16:
		for i := 0; i < n; i++ {
			binary.LittleEndian.PutUint16(w[2*i:], quant.FP32ToBF16(float32(r.NormFloat64())))
		}
		return w
	}
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	bs := t.TypeSize()
	for b := 0; b < len(w)/bs; b++ {
		for _, off := range halfFields[t] {
			binary.LittleEndian.PutUint16(w[b*bs+off:], randHalf(r, -16, 0))
		}
		if t == quant.MXFP4 {
			w[b*bs] = byte(100 + r.IntN(50)) // 2^-28 .. 2^21: finite products
		}
	}
	return w
}

// makeQ8K builds a valid Q8_K block (bsums consistent with qs).
func makeQ8K(dst []byte, d float32, qs []int8) {
	binary.LittleEndian.PutUint32(dst, math.Float32bits(d))
	for i, q := range qs {
		dst[4+i] = byte(q)
	}
	for j := 0; j < 16; j++ {
		var s int16
		for _, q := range qs[16*j : 16*j+16] {
			s += int16(q)
		}
		binary.LittleEndian.PutUint16(dst[260+2*j:], uint16(s))
	}
}

// randActs returns a valid activation row of n elements for weight type t,
// with every byte value (including -128) among the quants.
func randActs(r *rand.Rand, t quant.Type, n int) []byte {
	vt := t.VecDotType()
	switch vt {
	case quant.F32, quant.F16, quant.BF16:
		return randWeights(r, vt, n)
	}
	size, _ := quant.RowSize(vt, int64(n))
	a := make([]byte, size)
	var qs [256]int8
	switch vt {
	case quant.Q8_K:
		for b := 0; b < n/256; b++ {
			for i := range qs {
				qs[i] = int8(r.Uint32())
			}
			d := float32(math.Pow(2, -10*r.Float64())) * float32(1-2*r.IntN(2))
			makeQ8K(a[292*b:], d, qs[:])
		}
	case quant.Q8_0:
		for i := range a {
			a[i] = byte(r.Uint32())
		}
		for b := 0; b < n/32; b++ {
			binary.LittleEndian.PutUint16(a[34*b:], randHalf(r, -10, 0))
		}
		noMinus128(t, a)
	}
	return a
}

// noMinus128 applies the Q8_0 kernels' precondition to a Q8_0 activation
// row: no quant is -128 (QuantizeActivation never produces one, and the
// sign trick of the Q8_0·Q8_0 kernel relies on it). Other weight types take
// any byte.
func noMinus128(t quant.Type, a []byte) {
	if t != quant.Q8_0 {
		return
	}
	for b := 0; b < len(a)/34; b++ {
		for i := 34*b + 2; i < 34*b+34; i++ {
			if a[i] == 0x80 {
				a[i] = 0x81
			}
		}
	}
}

// magnitude bounds the sum of |terms| a kernel adds for w·a: the sum of
// (|w_i| + |o_i|)·|a_i|, with o the block's offset or minimum part (the
// dequantized block with its quant bits cleared). Every SIMD kernel's
// partial sums are bounded by it, so float differences are measured
// against it rather than against a cancelling result.
func magnitude(t quant.Type, n int, w, a []byte) float64 {
	wd := make([]float32, n)
	od := make([]float32, n)
	ad := make([]float32, n)
	mustDeq(t, w, wd)
	mustDeq(t.VecDotType(), a, ad)
	if rs := quantRanges[t]; rs != nil {
		o := append([]byte(nil), w...)
		bs := t.TypeSize()
		for b := 0; b < len(o)/bs; b++ {
			for _, rg := range rs {
				clear(o[b*bs+rg[0] : b*bs+rg[1]])
			}
		}
		mustDeq(t, o, od)
	}
	var m float64
	for i := range wd {
		m += (math.Abs(float64(wd[i])) + math.Abs(float64(od[i]))) * math.Abs(float64(ad[i]))
	}
	return m
}

func mustDeq(t quant.Type, src []byte, dst []float32) {
	if err := quant.Dequantize(t, src, dst); err != nil {
		panic(err)
	}
}

// checkDot compares the active level's Dot with the reference on one row.
func checkDot(t *testing.T, typ quant.Type, n int, w, a []byte) (relErr float64) {
	t.Helper()
	want, err := quant.VecDot(typ, n, w, a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Dot(typ, n, w, a)
	if err != nil {
		t.Fatal(err)
	}
	if got == want {
		return 0
	}
	mag := magnitude(typ, n, w, a)
	diff := math.Abs(float64(got) - float64(want))
	if !(diff <= 1e-6*mag) {
		t.Fatalf("%s n=%d: got %g, reference %g: |diff| %g > 1e-6 × %g", typ, n, got, want, diff, mag)
	}
	return diff / mag
}

// TestDotRandom runs 100k random blocks per type (rows of 4 K-quant
// blocks, 32 blocks of the 32-element types, 1000 floats) on every level.
func TestDotRandom(t *testing.T) {
	const blocks = 100_000
	forEachLevel(t, func(t *testing.T) {
		for _, typ := range kernelTypes {
			t.Run(typ.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(typ), 1))
				n := 1024
				if typ.BlockSize() == 1 {
					n = 1000 // not a multiple of the vector loop: exercises the tail
				}
				rows := blocks * typ.BlockSize() / n
				if testing.Short() {
					rows /= 20
				}
				var worst float64
				for range rows {
					worst = max(worst, checkDot(t, typ, n, randWeights(r, typ, n), randActs(r, typ, n)))
				}
				t.Logf("%d rows of %d: worst |diff|/magnitude %.3g", rows, n, worst)
			})
		}
	})
}

// TestDotIntegerExact checks the integer part of the kernels exactly: with
// every float scale 1, each block's result is its integer sum, and while
// the sum of |terms| stays below 2^24 every partial sum in any order is an
// exactly representable integer, so the kernel must return it exactly.
func TestDotIntegerExact(t *testing.T) {
	one := quant.FP32ToFP16(1)
	forEachLevel(t, func(t *testing.T) {
		for _, typ := range kernelTypes {
			if typ.BlockSize() == 1 {
				continue
			}
			t.Run(typ.String(), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(typ), 2))
				n := typ.BlockSize()
				checked := 0
				for range 20000 {
					w := randWeights(r, typ, n)
					for _, off := range halfFields[typ] {
						binary.LittleEndian.PutUint16(w[off:], one)
					}
					if typ == quant.MXFP4 {
						w[0] = 128 // E8M0/2 = 1
					}
					if typ == quant.Q6_K { // keep the int8 scales small enough for 2^24
						for j := 192; j < 208; j++ {
							w[j] = byte(int8(r.IntN(33) - 16))
						}
					}
					a := randActs(r, typ, n)
					if typ.VecDotType() == quant.Q8_K {
						binary.LittleEndian.PutUint32(a, math.Float32bits(1))
					} else {
						binary.LittleEndian.PutUint16(a, one)
					}
					if magnitude(typ, n, w, a) >= 1<<24 {
						continue
					}
					checked++
					want, _ := quant.VecDot(typ, n, w, a)
					got, _ := Dot(typ, n, w, a)
					if got != want || got != float32(int32(got)) {
						t.Fatalf("block % x\ngot %v, want %v (an integer)", w, got, want)
					}
				}
				if checked < 5000 {
					t.Fatalf("only %d of 20000 blocks were small enough to check", checked)
				}
			})
		}
	})
}

// TestDotEdges covers hand-made blocks: zeros, every quant bit set with the
// largest scales, -128 activations, subnormal scales.
func TestDotEdges(t *testing.T) {
	type edge struct {
		name string
		w    func(typ quant.Type, w []byte)
		a    func(a []byte, qs []int8) (d float32)
	}
	fill := func(v byte) func(quant.Type, []byte) {
		return func(typ quant.Type, w []byte) {
			for i := range w {
				w[i] = v
			}
			bs := typ.TypeSize()
			for b := 0; b < len(w)/bs; b++ {
				for _, off := range halfFields[typ] {
					binary.LittleEndian.PutUint16(w[b*bs+off:], 0x7bff) // 65504
				}
			}
		}
	}
	subnormal := func(typ quant.Type, w []byte) {
		r := rand.New(rand.NewPCG(9, 9))
		copy(w, randWeights(r, typ, len(w)/typ.TypeSize()*typ.BlockSize()))
		bs := typ.TypeSize()
		for b := 0; b < len(w)/bs; b++ {
			for _, off := range halfFields[typ] {
				binary.LittleEndian.PutUint16(w[b*bs+off:], uint16(1+b%0x3ff)) // fp16 subnormals
			}
		}
	}
	constQ := func(q int8, d float32) func([]byte, []int8) float32 {
		return func(a []byte, qs []int8) float32 {
			for i := range qs {
				qs[i] = q
			}
			return d
		}
	}
	alt := func(a []byte, qs []int8) float32 {
		for i := range qs {
			qs[i] = int8(-128 + 255*(i%2))
		}
		return 3e-3
	}
	edges := []edge{
		{"zeros", fill(0), constQ(0, 0)},
		{"max/-128", fill(0xff), constQ(-128, 1)},
		{"max/127", fill(0xff), constQ(127, 1)},
		{"0x80/-128", fill(0x80), constQ(-128, 1)},
		{"max/alternating", fill(0xff), alt},
		{"subnormal-scales", subnormal, constQ(-128, 1e-40)},
		{"subnormal-scales/alternating", subnormal, alt},
	}
	forEachLevel(t, func(t *testing.T) {
		for _, typ := range kernelTypes {
			if typ.BlockSize() == 1 {
				continue
			}
			for _, e := range edges {
				t.Run(typ.String()+"/"+e.name, func(t *testing.T) {
					n := 4 * 256
					wsize, _ := quant.RowSize(typ, int64(n))
					w := make([]byte, wsize)
					e.w(typ, w)
					asize, _ := quant.RowSize(typ.VecDotType(), int64(n))
					a := make([]byte, asize)
					qs := make([]int8, 256)
					if typ.VecDotType() == quant.Q8_K {
						for b := 0; b < n/256; b++ {
							d := e.a(a, qs)
							makeQ8K(a[292*b:], d, qs)
						}
					} else {
						for b := 0; b < n/32; b++ {
							d := e.a(a, qs[:32])
							binary.LittleEndian.PutUint16(a[34*b:], quant.FP32ToFP16(d))
							for i, q := range qs[:32] {
								a[34*b+2+i] = byte(q)
							}
						}
						noMinus128(typ, a)
					}
					checkDot(t, typ, n, w, a)
				})
			}
		}
	})
}

// q8KInputs are activation rows that stress the Q8_K quantizer: ties in
// the rounding, signed maxima, repeated maxima of both signs, zeros, NaN,
// infinities, subnormals, huge values.
func q8KInputs(r *rand.Rand) map[string][]float32 {
	row := func(f func(i int) float32) []float32 {
		x := make([]float32, 256*4)
		for i := range x {
			x[i] = f(i)
		}
		return x
	}
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	return map[string][]float32{
		"normal":     row(func(int) float32 { return float32(r.NormFloat64()) }),
		"ties":       row(func(i int) float32 { return float32(i%255-127) + 0.5 }),
		"zeros":      row(func(int) float32 { return 0 }),
		"neg-zero":   row(func(int) float32 { return float32(math.Copysign(0, -1)) }),
		"both-signs": row(func(i int) float32 { return float32(1 - 2*(i%2)) }),
		"negmax":     row(func(i int) float32 { return -float32(i % 256) }),
		"nan":        row(func(i int) float32 { return [3]float32{nan, 1, -2}[i%3] }),
		"all-nan":    row(func(int) float32 { return nan }),
		"inf":        row(func(i int) float32 { return [3]float32{inf, 1, -inf}[i%3] }),
		"subnormal":  row(func(i int) float32 { return math.Float32frombits(uint32(i%64)) * float32(1-2*(i%2)) }),
		"tiny-max":   row(func(i int) float32 { return math.Float32frombits(uint32(1 + i%3)) }),
		"huge":       row(func(i int) float32 { return float32(r.NormFloat64()) * 3e38 }),
		"wide":       row(func(int) float32 { return float32(r.NormFloat64() * math.Pow(10, 30*r.Float64()-15)) }),
	}
}

// TestQuantizeQ8K checks the activation quantizer byte for byte against
// the reference, on the stress rows and on 20k random blocks.
func TestQuantizeQ8K(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 3))
		cases := q8KInputs(r)
		big := make([]float32, 256*20000)
		for i := range big {
			big[i] = float32(r.NormFloat64() * math.Exp(4*r.NormFloat64()))
		}
		cases["random-20k"] = big
		for name, x := range cases {
			t.Run(name, func(t *testing.T) {
				size, _ := quant.RowSize(quant.Q8_K, int64(len(x)))
				want := make([]byte, size)
				got := make([]byte, size)
				for i := range got {
					got[i] = 0xAA // the output must not depend on old bytes
				}
				if err := quant.Quantize(quant.Q8_K, x, want); err != nil {
					t.Fatal(err)
				}
				if err := QuantizeActivation(quant.Q2_K, x, got); err != nil {
					t.Fatal(err)
				}
				for b := 0; b < len(want); b += 292 {
					if string(got[b:b+292]) != string(want[b:b+292]) {
						t.Fatalf("block %d differs:\ngot  % x\nwant % x\ninput %v", b/292, got[b:b+292], want[b:b+292], x[b/292*256:b/292*256+256])
					}
				}
			})
		}
	})
}

// TestMatMul checks MatVec and MatMul against row-by-row Dot, bit for bit,
// for several thread counts, rows not a multiple of the row alignment, and
// activation counts that use the four-row kernels and the single-row tail.
func TestMatMul(t *testing.T) {
	forEachLevel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(4, 4))
		for _, typ := range kernelTypes {
			for _, rows := range []int{1, 17, 40} {
				n, m := 512, 6
				var w, act []byte
				for range rows {
					w = append(w, randWeights(r, typ, n)...)
				}
				for range m {
					act = append(act, randActs(r, typ, n)...)
				}
				wrow, _ := quant.RowSize(typ, int64(n))
				arow, _ := quant.RowSize(typ.VecDotType(), int64(n))
				want := make([]float32, m*rows)
				for j := range m {
					for i := range rows {
						want[j*rows+i], _ = Dot(typ, n, w[int64(i)*wrow:], act[int64(j)*arow:])
					}
				}
				for _, threads := range []int{0, 1, 2, 5} {
					got := make([]float32, m*rows)
					if err := MatMul(typ, w, rows, n, act, m, got, threads); err != nil {
						t.Fatal(err)
					}
					vec := make([]float32, rows)
					if err := MatVec(typ, w, rows, n, act, vec, threads); err != nil {
						t.Fatal(err)
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) || (i < rows && vec[i] != want[i]) {
							t.Fatalf("%s rows=%d threads=%d: output %d (row %d of activation %d) is %g, Dot gives %g",
								typ, rows, threads, i, i%rows, i/rows, got[i], want[i])
						}
					}
				}
			}
		}
	})
}

func TestMatMulErrors(t *testing.T) {
	w := make([]byte, 84)
	act := make([]byte, 292)
	out := make([]float32, 1)
	cases := map[string]error{
		"short weights":     MatVec(quant.Q2_K, w[:83], 1, 256, act, out, 1),
		"short activations": MatVec(quant.Q2_K, w, 1, 256, act[:291], out, 1),
		"short output":      MatVec(quant.Q2_K, w, 1, 256, act, nil, 1),
		"partial block":     MatVec(quant.Q2_K, w, 1, 200, act, out, 1),
		"unknown type":      MatVec(quant.Type(99), w, 1, 256, act, out, 1),
		"f32 length":        MatVecF32(quant.Q2_K, w, 1, 256, make([]float32, 255), out, 1),
	}
	for name, err := range cases {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestSharedFilesIdentical keeps the files both kernel packages carry in
// step (they may not import each other).
func TestSharedFilesIdentical(t *testing.T) {
	for _, f := range []string{"kernels.go", "wrap.go", "matvec.go", "kernels_test.go", "bench_test.go"} {
		a, errA := os.ReadFile(filepath.Join("..", "kernels-avx2", f))
		b, errB := os.ReadFile(filepath.Join("..", "kernels-avx512", f))
		if errA != nil || errB != nil {
			t.Fatalf("%s: %v %v", f, errA, errB)
		}
		strip := func(s []byte) string { _, rest, _ := strings.Cut(string(s), "\n"); return rest }
		if strip(a) != strip(b) {
			t.Errorf("%s differs between kernels-avx2 and kernels-avx512 (beyond the package clause)", f)
		}
	}
}
