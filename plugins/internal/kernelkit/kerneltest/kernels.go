// Package kerneltest is the test suite and the benchmarks every kernel
// plugin built on kernelkit runs against its Kit: each plugin package's
// tests are one-line calls (TestDotRandom calls DotRandom, BenchmarkMatVec
// BenchMatVec, ...), so that `go test -run` and `-bench` patterns name the
// same tests in every plugin. Results are checked against core/quant's
// reference on every level the machine runs.
package kerneltest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// keepLevel restores k's level when tb and its subtests are done.
func keepLevel(tb testing.TB, k *kernelkit.Kit) {
	l := k.Level()
	tb.Cleanup(func() {
		if err := k.SetLevel(l); err != nil {
			tb.Error(err)
		}
	})
}

// forEachLevel runs f under every level this machine supports.
func forEachLevel(t *testing.T, k *kernelkit.Kit, f func(t *testing.T)) {
	keepLevel(t, k)
	for _, name := range k.Levels() {
		if err := k.SetLevel(name); err != nil {
			t.Fatal(err)
		}
		t.Run(name, f)
	}
}

// Levels checks the reference comes first, a SIMD level is picked where
// there is one, and an unknown level is refused.
func Levels(t *testing.T, k *kernelkit.Kit) {
	names := k.Levels()
	if names[0] != "generic" {
		t.Fatalf("Levels()[0] = %q, want generic", names[0])
	}
	if got := k.Level(); !slices.Contains(names, got) || (len(names) > 1 && got == "generic") {
		t.Errorf("Level() = %q: want a SIMD level of %v", got, names)
	}
	if err := k.SetLevel("no-such-level"); err == nil {
		t.Error("SetLevel accepted an unknown level")
	}
	t.Logf("levels on this machine: %v", names)
}

// checkDot demands the active level's Dot be the reference's float bit
// for bit on one row (see exact.go).
func checkDot(t *testing.T, k *kernelkit.Kit, typ quant.Type, n int, w, a []byte) {
	t.Helper()
	want, err := quant.VecDot(typ, n, w, a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k.Dot(typ, n, w, a)
	if err != nil {
		t.Fatal(err)
	}
	if !sameFloat(got, want) {
		t.Fatalf("%s n=%d: got %g (%#08x), reference %g (%#08x): kernels must match the reference bit for bit",
			typ, n, got, math.Float32bits(got), want, math.Float32bits(want))
	}
}

// DotRandom runs 100k random blocks per type (rows of 4 K-quant
// blocks, 32 blocks of the 32-element types, 1000 floats) on every level.
func DotRandom(t *testing.T, k *kernelkit.Kit) {
	const blocks = 100_000
	forEachLevel(t, k, func(t *testing.T) {
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
				for range rows {
					checkDot(t, k, typ, n, randWeights(r, typ, n), randActs(r, typ, n))
				}
				t.Logf("%d rows of %d: every one bit for bit the reference's", rows, n)
			})
		}
	})
}

// intUnit is what a block's integer sum is multiplied by with every float
// scale 1: 1, but 1/8 for the IQ2 types, whose sums of grid values times
// 2*ls+1 ggml scales by 0.125.
func intUnit(t quant.Type) float32 {
	switch t {
	case quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S:
		return 0.125
	}
	return 1
}

// DotIntegerExact checks the integer part of the kernels exactly: with
// every float scale 1, each block's result is its integer sum, and while
// the sum of |terms| stays below 2^24 every partial sum in any order is an
// exactly representable integer, so the kernel must return it exactly.
func DotIntegerExact(t *testing.T, k *kernelkit.Kit) {
	one := quant.FP32ToFP16(1)
	forEachLevel(t, k, func(t *testing.T) {
		for _, typ := range kernelTypes {
			if typ.BlockSize() == 1 || fractional[typ] {
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
					if typ.VecDotType() == quant.Q8_1 {
						binary.LittleEndian.PutUint16(a[2:], quant.FP32ToFP16(float32(r.IntN(201)-100)))
					}
					if magnitude(typ, n, w, a) >= 1<<24 {
						continue
					}
					checked++
					want, _ := quant.VecDot(typ, n, w, a)
					got, _ := k.Dot(typ, n, w, a)
					if u := got / intUnit(typ); got != want || u != float32(int32(u)) {
						t.Fatalf("block % x\ngot %v, want %v (an integer times %v)", w, got, want, intUnit(typ))
					}
				}
				if checked < 5000 {
					t.Fatalf("only %d of 20000 blocks were small enough to check", checked)
				}
			})
		}
	})
}

// fractional are the types whose dot product is not an integer with
// every float scale 1 (IQ3_XXS's 0.25*sumf, the IQ1 types' delta 1/8):
// DotRandom checks their bits.
var fractional = map[quant.Type]bool{quant.IQ3_XXS: true, quant.IQ1_S: true, quant.IQ1_M: true}

// DotEdges covers hand-made blocks: zeros, every quant bit set with the
// largest scales, -128 activations, subnormal scales.
func DotEdges(t *testing.T, k *kernelkit.Kit) {
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
				if typ == quant.IQ1_M {
					setIQ1MScale(w[b*bs:], 0x7bff)
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
			if typ == quant.IQ1_M {
				setIQ1MScale(w[b*bs:], uint16(1+b%0x3ff))
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
	forEachLevel(t, k, func(t *testing.T) {
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
						// Q8_0, or Q8_1 with s (d times the quants' sum) after d.
						as, qo := 34, 2
						if typ.VecDotType() == quant.Q8_1 {
							as, qo = 36, 4
						}
						for b := 0; b < n/32; b++ {
							d := e.a(a, qs[:32])
							binary.LittleEndian.PutUint16(a[as*b:], quant.FP32ToFP16(d))
							sum := 0
							for i, q := range qs[:32] {
								a[as*b+qo+i] = byte(q)
								sum += int(q)
							}
							if qo == 4 {
								binary.LittleEndian.PutUint16(a[as*b+2:], quant.FP32ToFP16(d*float32(sum)))
							}
						}
						noMinus128(typ, a)
					}
					checkDot(t, k, typ, n, w, a)
				})
			}
		}
	})
}

// QuantizeQ8K checks the activation quantizer byte for byte against
// the reference, on the stress rows and on 20k random blocks.
func QuantizeQ8K(t *testing.T, k *kernelkit.Kit) {
	forEachLevel(t, k, func(t *testing.T) {
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
				if err := k.QuantizeActivation(quant.Q2_K, x, got); err != nil {
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

// MatMul checks MatVec and MatMul against row-by-row Dot, bit for bit,
// for several thread counts, rows not a multiple of the row alignment, and
// activation counts that use the four-row kernels and the single-row tail;
// and rows of 24 and 35 blocks, which MatVec and MatMul below four
// activation rows run a tile at a time where the level has tile kernels
// (Q3_K and Q6_K beyond 20 blocks, Q4_K and Q5_K beyond 32; 35 blocks:
// tiles of 11, 12 and 12, odd and even).
func MatMul(t *testing.T, k *kernelkit.Kit) {
	forEachLevel(t, k, func(t *testing.T) {
		r := rand.New(rand.NewPCG(4, 4))
		for _, typ := range kernelTypes {
			for _, shape := range []struct{ rows, n, m int }{
				// Two blocks; five blocks and nine activation rows (two four-row
				// passes and a tail); 24 blocks, too long to prepare for one
				// row, run tile by tile with 1-3 activation rows, or seven;
				// 28 and 35 blocks with four rows or more (tiles of four rows
				// and a tail of one to three); 5 and 12 blocks with two and
				// three rows (prepared together).
				{1, 512, 6}, {17, 512, 6}, {40, 512, 6}, {17, 1280, 9}, {40, 6144, 7},
				{1, 6144, 3}, {17, 6144, 3}, {40, 6144, 2}, {17, 35 * 256, 2},
				{9, 7168, 4}, {17, 35 * 256, 9}, {9, 7168, 6}, {17, 1280, 2}, {9, 3072, 3},
			} {
				rows, n, m := shape.rows, shape.n, shape.m
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
						want[j*rows+i], _ = k.Dot(typ, n, w[int64(i)*wrow:], act[int64(j)*arow:])
					}
				}
				for _, threads := range []int{0, 1, 2, 5} {
					got := make([]float32, m*rows)
					if err := k.MatMul(typ, w, rows, n, act, m, got, threads); err != nil {
						t.Fatal(err)
					}
					vec := make([]float32, rows)
					if err := k.MatVec(typ, w, rows, n, act, vec, threads); err != nil {
						t.Fatal(err)
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) || (i < rows && vec[i] != want[i]) {
							t.Fatalf("%s rows=%d n=%d threads=%d: output %d (row %d of activation %d) is %g, Dot gives %g",
								typ, rows, n, threads, i, i%rows, i/rows, got[i], want[i])
						}
					}
				}
			}
		}
	})
}

// MatMulErrors checks that bad lengths and types are errors.
func MatMulErrors(t *testing.T, k *kernelkit.Kit) {
	w := make([]byte, 84)
	act := make([]byte, 292)
	out := make([]float32, 1)
	cases := map[string]error{
		"short weights":     k.MatVec(quant.Q2_K, w[:83], 1, 256, act, out, 1),
		"short activations": k.MatVec(quant.Q2_K, w, 1, 256, act[:291], out, 1),
		"short output":      k.MatVec(quant.Q2_K, w, 1, 256, act, nil, 1),
		"partial block":     k.MatVec(quant.Q2_K, w, 1, 200, act, out, 1),
		"unknown type":      k.MatVec(quant.Type(99), w, 1, 256, act, out, 1),
		"f32 length":        k.MatVecF32(quant.Q2_K, w, 1, 256, make([]float32, 255), out, 1),
	}
	for name, err := range cases {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
