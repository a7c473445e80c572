package kerneltest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/quant"
	"github.com/k3-inference/k3/plugins/internal/kernelkit"
)

// serveEnv makes a plugin package's test binary serve k's plugin instead
// of running tests: PluginExecute starts it so as a plugin subprocess.
const serveEnv = "K3_KERNELSTEST_SERVE"

// Main is a plugin package's TestMain.
func Main(m *testing.M, k *kernelkit.Kit) {
	if os.Getenv(serveEnv) == "1" {
		plugin.ServeKernels(k.NewPlugin())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// pluginCase is a weight file with one matrix of each type and an arena
// holding activations for them.
type pluginCase struct {
	region plugin.Region
	arena  *host.Arena
	ops    []plugin.Op
	want   [][]float32 // MatMul of each op, computed directly
}

// newPluginCase builds one op per tested type over n activation rows; fast
// flags the F32/F16/BF16 ops plugin.MatMul.FastFloat (and computes their wanted
// outputs in float mode fast).
func newPluginCase(t *testing.T, k *kernelkit.Kit, n int, fast bool) *pluginCase {
	t.Helper()
	const rows, cols = 48, 512
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	dir := t.TempDir()
	a, err := host.CreateArena(dir, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	c := &pluginCase{arena: a}
	var file []byte
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_K, quant.Q2_K, quant.Q6_K, quant.BF16} {
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
		x := floats(a.Bytes(in))
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		act := make([]byte, n*int(mustRowSize(t, typ.VecDotType(), cols)))
		ar := len(act) / n
		for r := 0; r < n; r++ {
			if err := k.QuantizeActivation(typ, x[r*cols:(r+1)*cols], act[r*ar:(r+1)*ar]); err != nil {
				t.Fatal(err)
			}
		}
		want := make([]float32, n*rows)
		fastOp := fast && (typ == quant.F32 || typ == quant.F16 || typ == quant.BF16)
		if fastOp {
			if err := k.SetFloatMode("fast"); err != nil {
				t.Fatal(err)
			}
		}
		err = k.MatMul(typ, wb, rows, cols, act, n, want, 1)
		if err2 := k.SetFloatMode("exact"); err != nil || err2 != nil {
			t.Fatal(err, err2)
		}
		c.want = append(c.want, want)
		c.ops = append(c.ops, plugin.MatMul{
			Weight: plugin.WeightRef{Region: 0, Offset: off, Type: typ, Shape: []int64{cols, rows}},
			Input:  in, Output: out, Rows: n, FastFloat: fastOp}.Op())
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
		got = append(got, append([]float32(nil), floats(c.arena.Bytes(op.Outputs[0]))...)[:len(c.want[len(got)])])
	}
	return got
}

// PluginExecute runs one batch of products of every tested type in
// this process and in a plugin subprocess, each equal bit for bit to
// calling MatMul directly, in float mode exact and (the F32/F16/BF16 ops
// flagged plugin.MatMul.FastFloat) fast.
func PluginExecute(t *testing.T, k *kernelkit.Kit) {
	for _, sub := range []bool{false, true} {
		for _, n := range []int{1, 5} {
			for _, fast := range []bool{false, true} {
				t.Run(fmt.Sprintf("subprocess=%v/n=%d/fast=%v", sub, n, fast), func(t *testing.T) {
					c := newPluginCase(t, k, n, fast)
					kp := plugin.Kernels(k.NewPlugin())
					if sub {
						exe, _ := os.Executable()
						kk, proc, err := host.StartKernels(context.Background(), host.Launch{Name: "test", Path: exe, Env: []string{serveEnv + "=1"}})
						if err != nil {
							t.Fatal(err)
						}
						defer proc.Kill()
						kp = kk
					}
					info, err := kp.Describe(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					if len(info.Ops) != 1 || info.Ops[0].Op != kernelkit.OpMatMul || !strings.Contains(info.Name, k.Level()) {
						t.Errorf("Describe = %+v", info)
					}
					req := &plugin.ExecuteRequest{Arena: c.arena.Path(), Regions: []plugin.Region{c.region}, Threads: 2, Ops: c.ops}
					if _, err := kp.Execute(context.Background(), req); err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff(c.want, c.outputs()); diff != "" {
						t.Errorf("outputs differ from MatMul (-want +got):\n%s", diff)
					}
				})
			}
		}
	}
}

// PluginRejects checks that bad references are errors naming the
// problem, not crashes.
func PluginRejects(t *testing.T, k *kernelkit.Kit) {
	c := newPluginCase(t, k, 1, false)
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
		{"flags", bad(func(o *plugin.Op) { o.Ints = []int64{1, 4} }), "unknown flags 0x4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &plugin.ExecuteRequest{Arena: c.arena.Path(), Regions: []plugin.Region{c.region}, Ops: tc.ops}
			_, err := k.NewPlugin().Execute(context.Background(), req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// PluginLevelEnv forces each level this CPU runs through
// kernelkit.LevelEnv and checks that an unknown one is reported, not ignored.
func PluginLevelEnv(t *testing.T, k *kernelkit.Kit) {
	keepLevel(t, k)
	for _, l := range append(k.Levels(), "avx9000") {
		t.Run(l, func(t *testing.T) {
			t.Setenv(kernelkit.LevelEnv, l)
			p := k.NewPlugin()
			info, err := p.Describe(context.Background())
			if l == "avx9000" {
				if err == nil || !strings.Contains(err.Error(), "avx9000") {
					t.Errorf("Describe with %s=%s: err = %v", kernelkit.LevelEnv, l, err)
				}
				return
			}
			if err != nil || !strings.HasSuffix(info.Name, "("+l+")") {
				t.Errorf("Describe = %+v, %v", info, err)
			}
		})
	}
}

// floats views arena bytes as float32s; arena refs are 64-byte aligned.
func floats(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}
