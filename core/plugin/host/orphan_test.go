package host_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
)

// The main goroutine keeps the main thread, which Go never ends, so that
// TestPluginSurvivesStarterThreadExit's goroutine runs on a thread that
// does end with it.
func init() { runtime.LockOSThread() }

// runHost is the test binary as a k3 host: it starts a stager and a
// kernels plugin, opens the stager and creates an arena (so there are
// shared-memory files of both), prints the plugins' pids and waits to be
// killed.
func runHost() {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	// go-plugin appends this process's environment after a Launch's, so
	// the plugins would see K3_PLUGIN_TEST=host.
	os.Unsetenv("K3_PLUGIN_TEST")
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	st, err := host.SuperviseStager(ctx, subprocess("stager", log))
	if err != nil {
		fail(err)
	}
	if _, err := st.Open(ctx, &plugin.OpenRequest{}); err != nil {
		fail(err)
	}
	k, err := host.SuperviseKernels(ctx, subprocess("kernels", log))
	if err != nil {
		fail(err)
	}
	if _, err := host.CreateArena(host.ShmDir(), 1<<20); err != nil {
		fail(err)
	}
	fmt.Println(st.Process().Pid(), k.Process().Pid())
	select {}
}

// gone reports whether pid has exited (a zombie counts: its parent, now
// init, may be slow to reap it).
func gone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// TestPluginsDieWithHost kills a host with SIGKILL: its plugin processes
// exit by themselves and the shared-memory files of the host and its
// plugins are removed.
func TestPluginsDieWithHost(t *testing.T) {
	hostCmd := exec.Command(os.Args[0])
	hostCmd.Env = append(os.Environ(), "K3_PLUGIN_TEST=host")
	out, err := hostCmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := hostCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer hostCmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("host: %q %v", line, err)
	}
	var pids []int
	for _, f := range strings.Fields(line) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("host: %q", line)
		}
		pids = append(pids, pid)
	}
	shm := filepath.Join(host.ShmDir(), "k3-*-"+strconv.Itoa(hostCmd.Process.Pid)+"-*")
	if files, _ := filepath.Glob(shm); len(files) < 2 {
		t.Fatalf("host's shared memory before the kill: %v, want an arena and a stager directory", files)
	}
	if err := hostCmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	hostCmd.Wait()
	killed := time.Now()
	defer func() { t.Logf("plugins and files gone %v after the kill", time.Since(killed)) }()
	// Deadlines here are generous: the check is that it happens at all.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var left []string
		for _, pid := range pids {
			if !gone(pid) {
				left = append(left, fmt.Sprint("plugin pid ", pid))
			}
		}
		files, _ := filepath.Glob(shm)
		left = append(left, files...)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			for _, f := range files {
				os.RemoveAll(f)
			}
			t.Fatalf("after the host was killed, still there: %v", left)
		}
	}
}

// TestPluginIgnoresTermWithHostAlive: a SIGTERM to a plugin whose host
// lives (a service manager signalling the whole process group, or the
// parent-death signal of a host thread that exited) does not stop it; the
// host stops its plugins itself.
func TestPluginIgnoresTermWithHostAlive(t *testing.T) {
	ctx := context.Background()
	sup, err := host.SuperviseKernels(ctx, subprocess("kernels", slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	p := sup.Process()
	if err := syscall.Kill(p.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Calls for a while after the signal: a plugin that SIGTERM stopped
	// would be found dead by one of them.
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := sup.Describe(ctx); err != nil {
			t.Fatalf("describe after SIGTERM: %v", err)
		}
	}
	if p.Exited() || sup.Restarts() != 0 {
		t.Errorf("SIGTERM stopped the plugin of a living host (exited %v, restarts %d)", p.Exited(), sup.Restarts())
	}
}

// TestPluginSurvivesStarterThreadExit: the kernel sends the parent-death
// signal when the thread that started the plugin exits, which Go does to
// a thread whose goroutine ends locked to it. The host lives, so the
// plugin must too.
func TestPluginSurvivesStarterThreadExit(t *testing.T) {
	ctx := context.Background()
	started := make(chan *host.KernelsSupervisor)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		sup, err := host.SuperviseKernels(ctx, subprocess("kernels", slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Error(err)
		}
		started <- sup
	}()
	sup := <-started
	if sup == nil {
		t.FailNow()
	}
	defer sup.Close()
	p := sup.Process()
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := sup.Describe(ctx); err != nil {
			t.Fatalf("describe after the starting thread exited: %v", err)
		}
	}
	if p.Exited() || sup.Restarts() != 0 {
		t.Errorf("the plugin died with the thread that started it (exited %v, restarts %d)", p.Exited(), sup.Restarts())
	}
}
