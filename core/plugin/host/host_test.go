package host_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/plugin/plugintest"
	"github.com/k3-inference/k3/core/quant"
)

// logBuffer collects the host's log lines, safe for the plugin's stderr
// goroutine.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestStagerSubprocess(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(3, 4, m.Layers, m.Experts, m.TopK, 1.1)
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))

	digests := map[string][]byte{}
	for _, mode := range []string{"inprocess", "subprocess"} {
		t.Run(mode, func(t *testing.T) {
			var st plugin.Stager = &copyStager{}
			if mode == "subprocess" {
				sup, err := host.SuperviseStager(ctx, subprocess("stager", log))
				if err != nil {
					t.Fatal(err)
				}
				st = sup
			}
			r, resp, err := plugintest.NewRunner(ctx, st, m, m.Request(1<<20, t.TempDir(), nil))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if resp.Mode != "copy" {
				t.Errorf("mode %q", resp.Mode)
			}
			if err := r.Run(ctx, tr); err != nil {
				t.Fatal(err)
			}
			digests[mode] = r.Digest()
			if err := st.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	if !bytes.Equal(digests["inprocess"], digests["subprocess"]) {
		t.Error("in-process and subprocess runs acquired different bytes")
	}
	// The plugin's slog line came out of the host's logger with its name.
	if !strings.Contains(logs.String(), "msg=\"copy stager open\"") || !strings.Contains(logs.String(), "plugin=test-stager") {
		t.Errorf("plugin log not forwarded; host log:\n%s", logs.String())
	}
}

// TestSupervisorKill kills the plugin with SIGKILL in the middle of a
// sequence: the step in flight fails with ErrRestarted, the caller re-maps
// and re-issues it, and the run ends with the same bytes as an undisturbed
// one.
func TestSupervisorKill(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(5, 6, m.Layers, m.Experts, m.TopK, 1.1)

	ref, _, err := plugintest.NewRunner(ctx, &copyStager{}, m, m.Request(1<<20, t.TempDir(), nil))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	if err := ref.Run(ctx, tr); err != nil {
		t.Fatal(err)
	}

	sup, err := host.SuperviseStager(ctx, subprocess("stager", slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(ctx)
	r, _, err := plugintest.NewRunner(ctx, sup, m, m.Request(1<<20, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	restarted := 0
	for tok := range tr {
		for l := 0; l < m.Layers; l++ {
			if (tok == 2 && l == 0) || (tok == 4 && l == 2) {
				pid := sup.Process().Pid()
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatalf("kill -9 %d: %v", pid, err)
				}
			}
			err := r.TraceStep(ctx, tr, tok, l)
			if errors.Is(err, host.ErrRestarted) {
				restarted++
				if err := r.Remap(sup.Regions()); err != nil {
					t.Fatal(err)
				}
				err = r.TraceStep(ctx, tr, tok, l) // re-issue the step
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if restarted != 2 || sup.Restarts() != 2 {
		t.Errorf("saw %d ErrRestarted, supervisor restarted %d times; want 2", restarted, sup.Restarts())
	}
	if !bytes.Equal(r.Digest(), ref.Digest()) {
		t.Error("bytes acquired across restarts differ from an undisturbed run")
	}
}

func TestKernelsSubprocess(t *testing.T) {
	ctx := context.Background()
	k, proc, err := host.StartKernels(ctx, subprocess("kernels", slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	info, err := k.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&plugin.KernelsInfo{Name: "axpy-test", Ops: []plugin.OpSupport{{Op: "axpy", Types: []quant.Type{quant.F32}}}}, info); diff != "" {
		t.Error(diff)
	}

	const n = 1000
	arena, err := host.CreateArena(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer arena.Close()
	in, _ := arena.Alloc(4 * n)
	out, _ := arena.Alloc(4 * n)
	weights := make([]byte, 100+4*n) // the weight sits at offset 100 of its region
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(arena.Bytes(in)[4*i:], math.Float32bits(float32(i)))
		binary.LittleEndian.PutUint32(weights[100+4*i:], math.Float32bits(float32(-i)/4))
	}
	wpath := t.TempDir() + "/w.bin"
	if err := os.WriteFile(wpath, weights, 0o644); err != nil {
		t.Fatal(err)
	}
	// Two ops in one batch: the second reads the first's output from the
	// arena.
	req := &plugin.ExecuteRequest{
		Arena:   arena.Path(),
		Regions: []plugin.Region{{Kind: plugin.RegionShard, Path: wpath, Size: int64(len(weights))}},
		Ops: []plugin.Op{
			{Name: "axpy", Weights: []plugin.WeightRef{{Region: 0, Offset: 100, Type: quant.F32, Shape: []int64{n}}}, Inputs: []plugin.ArenaRef{in}, Outputs: []plugin.ArenaRef{out}, Floats: []float32{2}},
			{Name: "axpy", Weights: []plugin.WeightRef{{Region: 0, Offset: 100, Type: quant.F32, Shape: []int64{n}}}, Inputs: []plugin.ArenaRef{out}, Outputs: []plugin.ArenaRef{out}, Floats: []float32{0.5}},
		},
	}
	if _, err := k.Execute(ctx, req); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		got := math.Float32frombits(binary.LittleEndian.Uint32(arena.Bytes(out)[4*i:]))
		x, w := float32(i), float32(-i)/4
		if want := 0.5*(2*x+w) + w; got != want {
			t.Fatalf("out[%d] = %v, want %v", i, got, want)
		}
	}
	// kill -9 between batches: the supervisor restarts the plugin and the
	// re-issued batch, reading the arena the dead process left, gives the
	// same result.
	sup, err := host.SuperviseKernels(ctx, subprocess("kernels", slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	want := append([]byte(nil), arena.Bytes(out)...)
	if err := syscall.Kill(sup.Process().Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rerun := *req
	rerun.Ops = req.Ops[:1] // out = 2*in + w, from the arena's input
	if _, err := sup.Execute(ctx, &rerun); !errors.Is(err, host.ErrRestarted) {
		t.Fatalf("execute on a killed plugin: %v", err)
	}
	if _, err := sup.Execute(ctx, &rerun); err != nil {
		t.Fatal(err)
	}
	rerun.Ops = req.Ops[1:]
	if _, err := sup.Execute(ctx, &rerun); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(arena.Bytes(out), want) || sup.Restarts() != 1 {
		t.Errorf("after restart: same output %v, restarts %d", bytes.Equal(arena.Bytes(out), want), sup.Restarts())
	}

	// An op outside the arena is the plugin's error, not a crash.
	req.Ops[0].Outputs[0].Offset = 1 << 30
	if _, err := k.Execute(ctx, req); err == nil || errors.Is(err, host.ErrUnavailable) {
		t.Errorf("out-of-arena op: %v", err)
	}
}

func TestArena(t *testing.T) {
	a, err := host.CreateArena(t.TempDir(), 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	x, err := a.Alloc(100) // rounds to 128
	if err != nil {
		t.Fatal(err)
	}
	y, _ := a.Alloc(64)
	z, _ := a.Alloc(256)
	if diff := cmp.Diff([]plugin.ArenaRef{{Offset: 0, Size: 128}, {Offset: 128, Size: 64}, {Offset: 192, Size: 256}}, []plugin.ArenaRef{x, y, z}); diff != "" {
		t.Errorf("allocations: %s", diff)
	}
	if _, err := a.Alloc(1024); !errors.Is(err, host.ErrArenaFull) {
		t.Errorf("oversized alloc: %v", err)
	}
	a.Free(x)
	a.Free(z)
	a.Free(y) // coalesces all three with the tail
	if got := a.FreeBytes(); got != 1024 {
		t.Errorf("free bytes after freeing all: %d", got)
	}
	if big, err := a.Alloc(1024); err != nil || big.Offset != 0 {
		t.Errorf("whole-arena alloc after coalescing: %+v %v", big, err)
	}

	// A plugin's view sees the core's writes, and the core sees the plugin's.
	view, err := plugin.OpenArena(a.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	copy(a.Bytes(plugin.ArenaRef{Offset: 10, Size: 5}), "hello")
	copy(view.Bytes(plugin.ArenaRef{Offset: 20, Size: 5}), "world")
	if got := string(view.Bytes(plugin.ArenaRef{Offset: 10, Size: 5})) + string(a.Bytes(plugin.ArenaRef{Offset: 20, Size: 5})); got != "helloworld" {
		t.Errorf("shared view: %q", got)
	}
	// A plugin's view has no Alloc: plugin.Arena has none (the type
	// says so; it was a run-time error before the host package).
	if err := view.Check(plugin.ArenaRef{Offset: 1000, Size: 100}); err == nil {
		t.Error("out-of-range ref passed Check")
	}
}

func TestServeBuiltinUnknown(t *testing.T) {
	if err := host.ServeBuiltin("no-such-plugin"); err == nil || !strings.Contains(err.Error(), "no-such-plugin") {
		t.Errorf("unknown built-in: %v", err)
	}
	if _, _, err := host.StartStager(context.Background(), host.Launch{Name: "no-such", InProcess: true}); err == nil {
		t.Error("unknown in-process stager started")
	}
}

// BenchmarkAcquire measures one Acquire round trip (a Kimi K3 decode
// step's 48 slices) in-process and through a real plugin subprocess; the
// difference is the IPC cost per call.
func BenchmarkAcquire(b *testing.B) {
	ctx := context.Background()
	m := plugintest.Build(b, b.TempDir(), plugintest.Spec{Shards: 1, Layers: 1, Experts: 64, TopK: 16, ExpertSizes: []int64{64, 64, 64}, Seed: 1})
	var slices []plugin.Slice
	for _, id := range m.Routed(0) {
		for e := 0; e < 16; e++ {
			slices = append(slices, plugin.Slice{Tensor: id, Expert: e * 4})
		}
	}
	for _, mode := range []string{"inprocess", "subprocess"} {
		b.Run(mode, func(b *testing.B) {
			var st plugin.Stager = &copyStager{}
			if mode == "subprocess" {
				s, proc, err := host.StartStager(ctx, subprocess("stager", slog.New(slog.DiscardHandler)))
				if err != nil {
					b.Fatal(err)
				}
				defer proc.Kill()
				st = s
			}
			if _, err := st.Open(ctx, m.Request(1<<20, b.TempDir(), nil)); err != nil {
				b.Fatal(err)
			}
			defer st.Close(ctx)
			req := &plugin.AcquireRequest{Slices: slices}
			b.ReportAllocs()
			for b.Loop() {
				req.Step++
				if _, err := st.Acquire(ctx, req); err != nil {
					b.Fatal(err)
				}
				if err := st.Release(ctx, &plugin.ReleaseRequest{Step: req.Step}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkExecute measures one empty Execute round trip, the kernels
// boundary's fixed cost per batch: in-process, through the shared-memory
// doorbell and over gRPC.
func BenchmarkExecute(b *testing.B) {
	ctx := context.Background()
	arena, err := host.CreateArena(b.TempDir(), 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer arena.Close()
	req := &plugin.ExecuteRequest{Arena: arena.Path(), Threads: 1}
	for _, mode := range []string{"inprocess", "doorbell", "grpc"} {
		b.Run(mode, func(b *testing.B) {
			var k plugin.Kernels = &axpyKernels{}
			if mode != "inprocess" {
				l := subprocess("kernels", slog.New(slog.DiscardHandler))
				if mode == "grpc" {
					l.Env = append(l.Env, host.DoorbellEnv+"=off")
				}
				pk, proc, err := host.StartKernels(ctx, l)
				if err != nil {
					b.Fatal(err)
				}
				defer proc.Kill()
				if proc.Doorbell() != (mode == "doorbell") {
					b.Fatalf("doorbell %v", proc.Doorbell())
				}
				k = pk
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := k.Execute(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestOlderProtocolRefused: a plugin built against an SDK of the previous
// protocol version is refused at the handshake with an error that says
// which versions met and what to do.
func TestOlderProtocolRefused(t *testing.T) {
	_, _, err := host.StartStager(context.Background(), subprocess("old", slog.New(slog.DiscardHandler)))
	want := fmt.Sprintf("plugin test-old: start: the plugin speaks protocol %d and this k3 speaks %d: rebuild it", plugin.ProtocolVersion-1, plugin.ProtocolVersion)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one with %q", err, want)
	}
}
