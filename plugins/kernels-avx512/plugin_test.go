package kernelsavx512

// This file is kept identical (but for the package clause) in
// plugins/kernels-avx2 and plugins/kernels-avx512.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/quant"
)

func TestMain(m *testing.M) {
	if os.Getenv("K3_KERNELSTEST_SERVE") == "1" {
		plugin.ServeKernels(NewPlugin())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// pluginCase is a weight file with one matrix of each type and an arena
// holding activations for them.
type pluginCase struct {
	region plugin.Region
	arena  *plugin.Arena
	ops    []plugin.Op
	want   [][]float32 // MatMul of each op, computed directly
}

func newPluginCase(t *testing.T, n int) *pluginCase {
	t.Helper()
	const rows, cols = 48, 512
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	dir := t.TempDir()
	a, err := plugin.CreateArena(dir, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	c := &pluginCase{arena: a}
	var file []byte
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_K, quant.Q2_K, quant.Q6_K} {
		src := make([]float32, rows*cols)
		for i := range src {
			src[i] = float32(rng.NormFloat64())
		}
		rb, _ := quant.RowSize(typ, cols)
		wb := make([]byte, rb*rows)
		if err := quant.Quantize(typ, src, wb); err != nil {
			t.Fatal(err)
		}
		off := int64(len(file)) + 7 // an unaligned offset, as in a GGUF
		file = append(file, make([]byte, 7)...)
		file = append(file, wb...)
		in, err := a.Alloc(int64(n * cols * 4))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := a.Alloc(int64(n * rows * 4))
		x := f32(a.Bytes(in))
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		act := make([]byte, n*int(mustRowSize(t, typ.VecDotType(), cols)))
		ar := len(act) / n
		for r := 0; r < n; r++ {
			if err := QuantizeActivation(typ, x[r*cols:(r+1)*cols], act[r*ar:(r+1)*ar]); err != nil {
				t.Fatal(err)
			}
		}
		want := make([]float32, n*rows)
		if err := MatMul(typ, wb, rows, cols, act, n, want, 1); err != nil {
			t.Fatal(err)
		}
		c.want = append(c.want, want)
		c.ops = append(c.ops, plugin.Op{Name: opMatMul,
			Weights: []plugin.WeightRef{{Region: 0, Offset: off, Type: typ, Shape: []int64{cols, rows}}},
			Inputs:  []plugin.ArenaRef{in}, Outputs: []plugin.ArenaRef{out}, Ints: []int64{int64(n)}})
	}
	path := filepath.Join(dir, "weights.bin")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	c.region = plugin.Region{Kind: plugin.RegionShard, Path: path, Size: int64(len(file))}
	return c
}

func mustRowSize(t *testing.T, typ quant.Type, n int64) int64 {
	rs, err := quant.RowSize(typ, n)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func (c *pluginCase) outputs() [][]float32 {
	var got [][]float32
	for _, op := range c.ops {
		got = append(got, append([]float32(nil), f32(c.arena.Bytes(op.Outputs[0]))...)[:len(c.want[len(got)])])
	}
	return got
}

// TestPluginExecute runs one batch of products of every tested type in
// this process and in a plugin subprocess, each equal bit for bit to
// calling MatMul directly.
func TestPluginExecute(t *testing.T) {
	for _, sub := range []bool{false, true} {
		for _, n := range []int{1, 5} {
			t.Run(fmt.Sprintf("subprocess=%v/n=%d", sub, n), func(t *testing.T) {
				c := newPluginCase(t, n)
				k := plugin.Kernels(NewPlugin())
				if sub {
					exe, _ := os.Executable()
					kk, proc, err := plugin.StartKernels(context.Background(), plugin.Launch{Name: "test", Path: exe, Env: []string{"K3_KERNELSTEST_SERVE=1"}})
					if err != nil {
						t.Fatal(err)
					}
					defer proc.Kill()
					k = kk
				}
				info, err := k.Describe(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if len(info.Ops) != 1 || info.Ops[0].Op != opMatMul || !strings.Contains(info.Name, Level()) {
					t.Errorf("Describe = %+v", info)
				}
				req := &plugin.ExecuteRequest{Arena: c.arena.Path(), Regions: []plugin.Region{c.region}, Threads: 2, Ops: c.ops}
				if _, err := k.Execute(context.Background(), req); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(c.want, c.outputs()); diff != "" {
					t.Errorf("outputs differ from MatMul (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestPluginRejects checks that bad references are errors naming the
// problem, not crashes.
func TestPluginRejects(t *testing.T) {
	c := newPluginCase(t, 1)
	op := c.ops[3]
	bad := func(f func(*plugin.Op)) []plugin.Op {
		o := op
		o.Weights = []plugin.WeightRef{op.Weights[0]}
		o.Weights[0].Shape = append([]int64(nil), op.Weights[0].Shape...)
		f(&o)
		return []plugin.Op{o}
	}
	for _, tc := range []struct {
		name string
		ops  []plugin.Op
		want string
	}{
		{"unknown op", bad(func(o *plugin.Op) { o.Name = "softmax" }), "not an op"},
		{"region", bad(func(o *plugin.Op) { o.Weights[0].Region = 3 }), "region 3"},
		{"weight past the file", bad(func(o *plugin.Op) { o.Weights[0].Offset = c.region.Size - 10 }), "outside region"},
		{"arena range", bad(func(o *plugin.Op) { o.Outputs = []plugin.ArenaRef{{Offset: c.arena.Size() - 64, Size: 1 << 20}} }), "outside"},
		{"short input", bad(func(o *plugin.Op) { o.Inputs = []plugin.ArenaRef{{Offset: 0, Size: 16}} }), "input of 16"},
		{"overlap", bad(func(o *plugin.Op) { o.Outputs = o.Inputs }), "overlap"},
		{"shape", bad(func(o *plugin.Op) { o.Weights[0].Shape = []int64{512} }), "not a matrix"},
		{"rows", bad(func(o *plugin.Op) { o.Ints = []int64{0} }), "0 activation rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &plugin.ExecuteRequest{Arena: c.arena.Path(), Regions: []plugin.Region{c.region}, Ops: tc.ops}
			_, err := NewPlugin().Execute(context.Background(), req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestPluginLevelEnv forces each level this CPU runs through LevelEnv and
// checks that an unknown one is reported, not ignored.
func TestPluginLevelEnv(t *testing.T) {
	defer SetLevel(Level())
	for _, l := range append(Levels(), "avx9000") {
		t.Run(l, func(t *testing.T) {
			t.Setenv(LevelEnv, l)
			p := NewPlugin()
			info, err := p.Describe(context.Background())
			if l == "avx9000" {
				if err == nil || !strings.Contains(err.Error(), "avx9000") {
					t.Errorf("Describe with %s=%s: err = %v", LevelEnv, l, err)
				}
				return
			}
			if err != nil || !strings.HasSuffix(info.Name, "("+l+")") {
				t.Errorf("Describe = %+v, %v", info, err)
			}
		})
	}
}

// TestPluginFilesIdentical keeps this package's plugin files in step with
// the other kernels package's.
func TestPluginFilesIdentical(t *testing.T) {
	for _, f := range []string{"plugin.go", "plugin_test.go"} {
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
