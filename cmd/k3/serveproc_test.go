package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/plugin/host"
)

// serveProc is `k3 serve` running as a real process (this test binary
// acting as k3, see TestMain), its plugins re-executed as its children.
type serveProc struct {
	cmd     *exec.Cmd
	url     string
	plugins []int
	log     *lockedBuffer
	exited  chan struct{} // closed when the process has exited
	waitErr error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(line + "\n")
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var listeningRE = regexp.MustCompile(`msg="server listening" addr=(\S+)`)

// startServe starts k3 serve in its own process group, so that the test
// can signal the group as a terminal (Ctrl-C) or systemd (SIGTERM to every
// process of the unit) does, and waits until the model is ready.
func startServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &serveProc{log: &lockedBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(exe, append([]string{"serve", "--port", "0"}, args...)...)
	p.cmd.Env = append(os.Environ(), "K3_TEST_AS_K3=1")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 2)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.log.add(line)
			if m := listeningRE.FindStringSubmatch(line); m != nil {
				ready <- m[1]
			}
			if strings.Contains(line, `msg="model ready"`) {
				ready <- ""
			}
		}
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	})
	for got := 0; got < 2; got++ {
		select {
		case addr := <-ready:
			if addr != "" {
				p.url = "http://" + addr
			}
		case <-p.exited:
			t.Fatalf("k3 serve exited: %v\n%s", p.waitErr, p.log)
		case <-time.After(2 * time.Minute):
			t.Fatalf("k3 serve not ready:\n%s", p.log)
		}
	}
	p.plugins = childPids(t, p.cmd.Process.Pid)
	return p
}

// childPids lists the processes whose parent is pid.
func childPids(t *testing.T, pid int) []int {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []int
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			n, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			kids = append(kids, n)
		}
	}
	return kids
}

// cpuSeconds is the CPU time (user and system) k3 serve and its plugins
// have used so far, read from /proc; 0 without it.
func (p *serveProc) cpuSeconds() float64 {
	var ticks int
	for _, pid := range append([]int{p.cmd.Process.Pid}, p.plugins...) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		// After the comm: state ppid ... utime (11) stime (12), in ticks.
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 12 {
			u, _ := strconv.Atoi(fields[11])
			k, _ := strconv.Atoi(fields[12])
			ticks += u + k
		}
	}
	return float64(ticks) / 100 // USER_HZ
}

// signalAndWait signals the process group n times, each after the server
// logged the previous one, and returns the exit code and how long the
// process took to exit after the first signal.
func (p *serveProc) signalAndWait(t *testing.T, sig syscall.Signal, n int) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	for i, logged := range []string{`msg="stopping:`, `msg="second signal:`}[:n] {
		if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
			t.Fatal(err)
		}
		for ; !strings.Contains(p.log.String(), logged); time.Sleep(time.Millisecond) {
			if time.Since(start) > time.Minute {
				t.Fatalf("signal %d not logged:\n%s", i+1, p.log)
			}
		}
	}
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Fatalf("k3 serve did not exit after %v:\n%s", sig, p.log)
	}
	took := time.Since(start)
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode(), took
	}
	if p.waitErr != nil {
		t.Fatal(p.waitErr)
	}
	return 0, took
}

// checkClean checks what a clean exit leaves: no plugin restarted after
// the first logFrom bytes of the log (the shutdown), no plugin process
// left, no shared-memory file of the server's.
func (p *serveProc) checkClean(t *testing.T, logFrom int) {
	t.Helper()
	log := p.log.String()
	if strings.Contains(log[min(logFrom, len(log)):], "restarting") {
		t.Errorf("a plugin was restarted during shutdown:\n%s", log)
	}
	for _, pid := range p.plugins {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("plugin process %d outlived k3 serve (kill 0: %v)", pid, err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(host.ShmDir(), fmt.Sprintf("k3-*-%d-*", p.cmd.Process.Pid)))
	if len(left) > 0 {
		t.Errorf("shared memory left behind: %v", left)
	}
}

// gone reports whether process pid has exited (a zombie nobody reaped yet
// counts: an orphan's new parent may be slow to reap it).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) == 0 || fields[0] == "Z" || fields[0] == "X"
}

// waitGone waits until pid has exited (see gone) and reports whether it
// did within limit.
func waitGone(pid int, limit time.Duration) bool {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if gone(pid) {
			return true
		}
	}
	return gone(pid)
}

// waitExit waits for the server to exit by itself and returns its exit
// code and how long that took (-1 and -1s if it did not within limit).
func (p *serveProc) waitExit(limit time.Duration) (int, time.Duration) {
	start := time.Now()
	select {
	case <-p.exited:
	case <-time.After(limit):
		return -1, -time.Second
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode(), time.Since(start)
	}
	if p.waitErr != nil {
		return -1, time.Since(start)
	}
	return 0, time.Since(start)
}

// child is the pid of the server's plugin process `k3 plugin name` (it
// changes when the plugin is restarted), or 0 if none appears in 10s.
func (p *serveProc) child(t *testing.T, name string) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, pid := range childPids(t, p.cmd.Process.Pid) {
			cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.Contains(string(cl), "plugin\x00"+name) && !gone(pid) {
				return pid
			}
		}
	}
	return 0
}
