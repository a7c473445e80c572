package host_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/plugin/plugintest"
)

// killAndWait kills the plugin process with SIGKILL and waits until its
// supervisor's client has seen it exit.
func killAndWait(t *testing.T, p *host.Process) {
	t.Helper()
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", p.Pid(), err)
	}
	for deadline := time.Now().Add(10 * time.Second); !p.Exited(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed plugin did not exit")
		}
	}
}

// waitHealthy polls h until the plugin is Healthy again (the background
// retry brought it back) or a generous deadline passes.
func waitHealthy(t *testing.T, h func() host.Health) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); h().State != host.Healthy; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("plugin not healthy again: %+v", h())
		}
	}
}

// TestSupervisorRestartFails kills the stager while its shard file is
// moved away, so the restart's re-open fails: the step fails (not
// ErrRestarted), the supervisor reports itself down with the reason, and
// once the file is back it comes back by itself, in the background; the
// next call reports ErrRestarted, the caller re-maps and re-issues, and the
// run ends with the bytes of an undisturbed one. The dead process's files
// stay until the caller re-mapped.
func TestSupervisorRestartFails(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(5, 6, m.Layers, m.Experts, m.TopK, 1.1)
	ref := plugintest.Reference(t, m, tr)

	var logs logBuffer
	sup, err := host.SuperviseStager(ctx, subprocess("stager", slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close(ctx)
	r, resp, err := plugintest.NewRunner(ctx, sup, m, m.Request(1<<20, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	root := filepath.Dir(filepath.Dir(resp.Regions[0].Path))
	shard := m.Req.Shards[0]
	for tok := range tr {
		for l := 0; l < m.Layers; l++ {
			if tok == 2 && l == 1 {
				if err := os.Rename(shard, shard+".away"); err != nil {
					t.Fatal(err)
				}
				killAndWait(t, sup.Process())
				err := r.TraceStep(ctx, tr, tok, l)
				if err == nil || errors.Is(err, host.ErrRestarted) || !errors.Is(err, host.ErrDown) {
					t.Fatalf("step with the plugin dead and its file gone: %v", err)
				}
				// What a client is shown names the backend, not the file.
				var be *host.BackendError
				if !errors.As(err, &be) || be.PublicReason() != "the staging backend (plugin test-stager) failed" {
					t.Errorf("step error %v: BackendError %+v, want one naming the staging backend", err, be)
				}
				if h := sup.Health(); h.State != host.Down || !strings.Contains(h.Reason, "re-open") || h.Err() == nil {
					t.Errorf("health while the file is gone: %+v", h)
				}
				// The dead process's files stay: the caller still maps them.
				if _, err := os.Stat(resp.Regions[0].Path); err != nil {
					t.Errorf("the dead process's region went before the caller re-mapped: %v", err)
				}
				if err := os.Rename(shard+".away", shard); err != nil {
					t.Fatal(err)
				}
				waitHealthy(t, sup.Health)
				if h := sup.Health(); h.Err() != nil || h.Restarts != 1 {
					t.Errorf("health after the file came back: %+v, err %v", h, h.Err())
				}
				err = r.TraceStep(ctx, tr, tok, l)
				if !errors.Is(err, host.ErrRestarted) {
					t.Fatalf("first step after the background restart: %v, want ErrRestarted", err)
				}
				if err := r.Remap(sup.Regions()); err != nil {
					t.Fatal(err)
				}
				sup.ReleaseStale()
				if dirs, _ := os.ReadDir(root); len(dirs) != 1 {
					t.Errorf("%d process directories under %s after ReleaseStale, want 1", len(dirs), root)
				}
			}
			if err := r.TraceStep(ctx, tr, tok, l); err != nil {
				t.Fatalf("token %d layer %d: %v", tok, l, err)
			}
		}
	}
	if !bytes.Equal(r.Digest(), ref) {
		t.Error("bytes acquired across the failed restart differ from an undisturbed run")
	}
	if err := sup.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("shm directory left after Close: %v", err)
	}
	if !strings.Contains(logs.String(), "plugin restart failed; retrying") {
		t.Errorf("no log of the failed restart:\n%s", logs.String())
	}
}

// TestSupervisorClose: a call after Close, or one whose plugin Close
// stopped under it, fails with ErrClosed and restarts nothing.
func TestSupervisorClose(t *testing.T) {
	ctx := context.Background()
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	var logs logBuffer
	sup, err := host.SuperviseStager(ctx, subprocess("stager", slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := plugintest.NewRunner(ctx, sup, m, m.Request(1<<20, "", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := sup.Process()
	if err := sup.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sup.Stats(ctx); !errors.Is(err, host.ErrClosed) {
		t.Errorf("stats after Close: %v, want ErrClosed", err)
	}
	if !p.Exited() {
		t.Error("the plugin process runs after Close")
	}
	if h := sup.Health(); h.State != host.Closed || h.Restarts != 0 {
		t.Errorf("health after Close: %+v", h)
	}
	if strings.Contains(logs.String(), "restarting") {
		t.Errorf("Close restarted the plugin:\n%s", logs.String())
	}
}

// TestKernelsSupervisorRestartFails: a kernels plugin whose binary is
// gone when it dies is down until the binary is back, then comes back by
// itself.
func TestKernelsSupervisorRestartFails(t *testing.T) {
	ctx := context.Background()
	bin := filepath.Join(t.TempDir(), "plugin")
	if err := os.Symlink(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	l := subprocess("kernels", slog.New(slog.DiscardHandler))
	l.Path = bin
	sup, err := host.SuperviseKernels(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	os.Remove(bin)
	killAndWait(t, sup.Process())
	if _, err := sup.Describe(ctx); !errors.Is(err, host.ErrDown) {
		t.Fatalf("describe with the plugin dead and its binary gone: %v", err)
	}
	if h := sup.Health(); h.State != host.Down || h.Err() == nil || !strings.Contains(h.Err().Error(), "test-kernels down since") {
		t.Errorf("health while the binary is gone: %+v (%v)", h, h.Err())
	}
	if err := os.Symlink(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, sup.Health)
	if _, err := sup.Describe(ctx); !errors.Is(err, host.ErrRestarted) {
		t.Fatalf("first call after the background restart: %v, want ErrRestarted", err)
	}
	if info, err := sup.Describe(ctx); err != nil || info.Name != "axpy-test" {
		t.Fatalf("describe after the restart: %v %v", info, err)
	}
	sup.Close()
	if _, err := sup.Describe(ctx); !errors.Is(err, host.ErrClosed) {
		t.Errorf("describe after Close: %v", err)
	}
}

// TestKernelsSupervisorCloseInFlight: Close during a batch ends the batch
// with ErrClosed; the plugin is not restarted (shutdown is not a crash).
func TestKernelsSupervisorCloseInFlight(t *testing.T) {
	ctx := context.Background()
	var logs logBuffer
	sup, err := host.SuperviseKernels(ctx, subprocess("kernels", slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	arena, err := host.CreateArena(t.TempDir(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer arena.Close()
	// Warm: the plugin has mapped the arena, so the next batch is in the
	// plugin when Close comes.
	if _, err := sup.Execute(ctx, &plugin.ExecuteRequest{Arena: arena.Path()}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := sup.Execute(ctx, &plugin.ExecuteRequest{Arena: arena.Path(), Ops: []plugin.Op{{Name: "sleep", Ints: []int64{60000}}}})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // let the batch reach the plugin
	sup.Close()
	if err := <-done; !errors.Is(err, host.ErrClosed) {
		t.Errorf("batch under Close: %v, want ErrClosed", err)
	}
	if sup.Restarts() != 0 || strings.Contains(logs.String(), "restarting") {
		t.Errorf("Close restarted the plugin (%d restarts):\n%s", sup.Restarts(), logs.String())
	}
}

// TestSupervisorWatch: a plugin that dies between calls is restarted in
// the background, without a call; the next call reports ErrRestarted, as
// if it had found the process dead, and the one after runs.
func TestSupervisorWatch(t *testing.T) {
	ctx := context.Background()
	sup, err := host.SuperviseKernels(ctx, subprocess("kernels", slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	killAndWait(t, sup.Process())
	for deadline := time.Now().Add(60 * time.Second); sup.Restarts() != 1 || sup.Health().State != host.Healthy; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not restarted in the background: %+v", sup.Health())
		}
	}
	if _, err := sup.Describe(ctx); !errors.Is(err, host.ErrRestarted) {
		t.Fatalf("first call after the background restart: %v, want ErrRestarted", err)
	}
	if _, err := sup.Describe(ctx); err != nil {
		t.Fatal(err)
	}
	if sup.Restarts() != 1 {
		t.Errorf("%d restarts, want 1", sup.Restarts())
	}
}
