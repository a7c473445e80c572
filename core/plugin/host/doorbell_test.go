package host_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/quant"
)

// axpyJob is an axpy batch over its own slice of an arena: out = a*in + w.
type axpyJob struct {
	arena   *host.Arena
	in, out plugin.ArenaRef
	n       int
	a       float32
	req     *plugin.ExecuteRequest
}

func newAxpyJob(t *testing.T, arena *host.Arena, wpath string, n int, a float32) *axpyJob {
	t.Helper()
	in, err := arena.Alloc(int64(4 * n))
	if err != nil {
		t.Fatal(err)
	}
	out, err := arena.Alloc(int64(4 * n))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		binary.LittleEndian.PutUint32(arena.Bytes(in)[4*i:], math.Float32bits(float32(i)*a))
	}
	return &axpyJob{arena: arena, in: in, out: out, n: n, a: a, req: &plugin.ExecuteRequest{
		Arena:   arena.Path(),
		Regions: []plugin.Region{{Kind: plugin.RegionShard, Path: wpath}},
		Ops: []plugin.Op{{Name: "axpy", Weights: []plugin.WeightRef{{Offset: 0, Type: quant.F32, Shape: []int64{int64(n)}}},
			Inputs: []plugin.ArenaRef{in}, Outputs: []plugin.ArenaRef{out}, Floats: []float32{a}}},
	}}
}

func (j *axpyJob) check() error {
	for i := range j.n {
		got := math.Float32frombits(binary.LittleEndian.Uint32(j.arena.Bytes(j.out)[4*i:]))
		if want := j.a*(float32(i)*j.a) + float32(-i); got != want {
			return fmt.Errorf("a=%v: out[%d] = %v, want %v", j.a, i, got, want)
		}
	}
	return nil
}

// axpyWeights writes w[i] = -i as the region the jobs read.
func axpyWeights(t *testing.T, n int) string {
	w := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(float32(-i)))
	}
	path := t.TempDir() + "/w.bin"
	if err := os.WriteFile(path, w, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDoorbell runs the same batches, a bad one included, through the
// doorbell, against a plugin that does not offer it (as one built on an
// older SDK answers) and with the host not asking for it: the results, and
// the error of the bad batch to the letter, are the same.
func TestDoorbell(t *testing.T) {
	ctx := context.Background()
	const n = 1000
	arena, err := host.CreateArena(t.TempDir(), 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer arena.Close()
	wpath := axpyWeights(t, n)
	errs := map[string]string{}
	for _, mode := range []string{"doorbell", "plugin without", "host off"} {
		t.Run(mode, func(t *testing.T) {
			l := subprocess("kernels", slog.New(slog.DiscardHandler))
			switch mode {
			case "plugin without":
				l.Env = append(l.Env, host.DoorbellEnv+"=off")
			case "host off":
				t.Setenv(host.DoorbellEnv, "off")
			}
			k, proc, err := host.StartKernels(ctx, l)
			if err != nil {
				t.Fatal(err)
			}
			defer proc.Kill()
			if got := proc.Doorbell(); got != (mode == "doorbell") {
				t.Fatalf("doorbell %v", got)
			}
			// Concurrent callers: one holds the doorbell, the others go
			// over gRPC meanwhile; every batch is computed.
			var wg sync.WaitGroup
			fail := make(chan error, 4)
			for g := range 4 {
				job := newAxpyJob(t, arena, wpath, n, float32(g+1))
				wg.Go(func() {
					for range 25 {
						clear(arena.Bytes(job.out))
						if _, err := k.Execute(ctx, job.req); err != nil {
							fail <- err
							return
						}
						if err := job.check(); err != nil {
							fail <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(fail)
			for err := range fail {
				t.Fatal(err)
			}
			bad := newAxpyJob(t, arena, wpath, n, 1)
			bad.req.Ops[0].Outputs[0].Offset = 1 << 30
			_, err = k.Execute(ctx, bad.req)
			if err == nil || errors.Is(err, host.ErrUnavailable) {
				t.Fatalf("out-of-arena op: %v", err)
			}
			errs[mode] = err.Error()
		})
	}
	if errs["doorbell"] != errs["plugin without"] || errs["doorbell"] != errs["host off"] {
		t.Errorf("the plugin's error differs by channel:\n%q\n%q\n%q", errs["doorbell"], errs["plugin without"], errs["host off"])
	}
}

// TestDoorbellKill9 kills the plugin in the middle of a batch sent through
// the doorbell: the caller gets ErrUnavailable (ErrRestarted from a
// supervisor) within a few ms, not when the batch would have ended, and the
// re-issued batch runs on the restarted plugin, through its doorbell.
func TestDoorbellKill9(t *testing.T) {
	ctx := context.Background()
	const n = 1000
	arena, err := host.CreateArena(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer arena.Close()
	job := newAxpyJob(t, arena, axpyWeights(t, n), n, 3)
	slow := *job.req
	slow.Ops = append([]plugin.Op{{Name: "sleep", Ints: []int64{10000}}}, job.req.Ops...)

	sup, err := host.SuperviseKernels(ctx, subprocess("kernels", slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	for round := range 2 {
		if !sup.Process().Doorbell() {
			t.Fatalf("round %d: no doorbell", round)
		}
		pid := sup.Process().Pid()
		time.AfterFunc(200*time.Millisecond, func() { syscall.Kill(pid, syscall.SIGKILL) })
		start := time.Now()
		_, err := sup.Execute(ctx, &slow)
		if !errors.Is(err, host.ErrRestarted) {
			t.Fatalf("round %d: execute on a plugin killed mid-batch: %v", round, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("round %d: the death was noticed after %v", round, d)
		}
		clear(arena.Bytes(job.out))
		if _, err := sup.Execute(ctx, job.req); err != nil {
			t.Fatal(err)
		}
		if err := job.check(); err != nil {
			t.Fatal(err)
		}
	}
	if sup.Restarts() != 2 {
		t.Errorf("restarts %d, want 2", sup.Restarts())
	}

	// Without a supervisor, the call reports the plugin unavailable.
	k, proc, err := host.StartKernels(ctx, subprocess("kernels", slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	pid := proc.Pid()
	time.AfterFunc(100*time.Millisecond, func() { syscall.Kill(pid, syscall.SIGKILL) })
	if _, err := k.Execute(ctx, &slow); !errors.Is(err, host.ErrUnavailable) {
		t.Errorf("execute on a plugin killed mid-batch: %v", err)
	}
	if _, err := k.Execute(ctx, job.req); !errors.Is(err, host.ErrUnavailable) {
		t.Errorf("execute on a dead plugin: %v", err)
	}
}
