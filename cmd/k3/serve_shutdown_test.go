package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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

	"github.com/k3-inference/k3/core/plugin"
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

// checkClean checks what a clean exit leaves: no plugin restarted, no
// plugin process left, no shared-memory file of the server's.
func (p *serveProc) checkClean(t *testing.T) {
	t.Helper()
	log := p.log.String()
	if strings.Contains(log, "restarting") {
		t.Errorf("a plugin was restarted during shutdown:\n%s", log)
	}
	for _, pid := range p.plugins {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("plugin process %d outlived k3 serve (kill 0: %v)", pid, err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(plugin.ShmDir(), fmt.Sprintf("k3-*-%d-*", p.cmd.Process.Pid)))
	if len(left) > 0 {
		t.Errorf("shared memory left behind: %v", left)
	}
}

// streamEvents posts a streaming completion and returns a function that
// reads the rest of the stream: its data events, and an error if the body
// did not end cleanly (curl's exit 18).
func streamEvents(t *testing.T, url string, maxTokens int) func() ([]string, error) {
	t.Helper()
	body := fmt.Sprintf(`{"prompt":"Once upon a time","max_tokens":%d,"stream":true,"ignore_eos":true}`, maxTokens)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	r := bufio.NewReader(resp.Body)
	var events []string
	read := func() error {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if err == io.EOF && line == "" {
					return io.EOF
				}
				return fmt.Errorf("after %d events: %w", len(events), err)
			}
			if line = strings.TrimSpace(line); line != "" {
				events = append(events, strings.TrimPrefix(line, "data: "))
				return nil
			}
		}
	}
	if err := read(); err != nil { // the first token is out: the generation runs
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { // a client that keeps reading
		defer resp.Body.Close()
		for {
			if err := read(); err != nil {
				done <- err
				return
			}
		}
	}()
	return func() ([]string, error) {
		if err := <-done; err != io.EOF {
			return events, err
		}
		return events, nil
	}
}

// lastChunk returns the finish_reason and error of the event before [DONE].
func lastChunk(t *testing.T, events []string) (finish string, errObj map[string]any) {
	t.Helper()
	if len(events) < 2 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end in a chunk and [DONE]: %q", events[max(len(events)-3, 0):])
	}
	var c struct {
		Choices []struct {
			FinishReason *string `json:"finish_reason"`
		}
		Error map[string]any
	}
	if err := json.Unmarshal([]byte(events[len(events)-2]), &c); err != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason == nil {
		t.Fatalf("last chunk has no finish_reason (%v): %s", err, events[len(events)-2])
	}
	return *c.Choices[0].FinishReason, c.Error
}

// TestServeShutdown signals a real `k3 serve` with its plugin processes
// the way a terminal (Ctrl-C: SIGINT to the process group) and systemd
// (SIGTERM to every process) do: a stream that the grace period covers
// completes, one it does not cover (or that a second Ctrl-C cuts short)
// ends with a final chunk and [DONE]; the server exits 0, no plugin is
// restarted or outlives it, and its shared-memory files are gone.
func TestServeShutdown(t *testing.T) {
	path, _ := tinyModel(t)
	for _, tc := range []struct {
		name       string
		sig        syscall.Signal
		grace      string
		signals    int
		maxTokens  int // 0: no request
		wantFinish string
	}{
		{"idle", syscall.SIGTERM, "10s", 1, 0, ""},
		{"SIGINT ends the stream", syscall.SIGINT, "0s", 1, 1500, "stop"},
		{"SIGTERM within the grace period", syscall.SIGTERM, "5m", 1, 100, "length"},
		{"SIGTERM past the grace period", syscall.SIGTERM, "1s", 1, 1500, "stop"},
		{"second Ctrl-C ends the grace period", syscall.SIGINT, "5m", 2, 1500, "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startServe(t, "-m", path, "-c", "2048", "-t", "2", "--shutdown-grace", tc.grace)
			var rest func() ([]string, error)
			if tc.maxTokens > 0 {
				rest = streamEvents(t, p.url, tc.maxTokens)
			}
			code, took := p.signalAndWait(t, tc.sig, tc.signals)
			t.Logf("exit %d %v after %v; plugins %v", code, tc.sig, took, p.plugins)
			if code != 0 {
				t.Errorf("exit code %d:\n%s", code, p.log)
			}
			if rest != nil {
				events, err := rest()
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				finish, errObj := lastChunk(t, events)
				if finish != tc.wantFinish || (errObj != nil) != (tc.wantFinish == "stop") {
					t.Errorf("stream ended with finish_reason %q, error %v", finish, errObj)
				}
			}
			p.checkClean(t)
		})
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

// TestPluginSIGTERMWithoutHost: a plugin ignores SIGTERM only while its
// host lives; once the host is gone (kill -9), SIGTERM ends it as usual.
func TestPluginSIGTERMWithoutHost(t *testing.T) {
	path, _ := tinyModel(t)
	p := startServe(t, "-m", path, "-c", "2048", "-t", "2")
	host := p.cmd.Process.Pid
	t.Cleanup(func() {
		left, _ := filepath.Glob(filepath.Join(plugin.ShmDir(), fmt.Sprintf("k3-*-%d-*", host)))
		for _, f := range left {
			os.RemoveAll(f)
		}
	})
	if len(p.plugins) == 0 {
		t.Skip("no plugin processes")
	}
	for _, pid := range p.plugins {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	// A generation runs on both plugins, which therefore still serve it.
	resp, err := http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":4}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, pid := range p.plugins {
		if resp.StatusCode != 200 || gone(pid) || strings.Contains(p.log.String(), "restarting") {
			t.Fatalf("plugin %d died of SIGTERM while its host lives (request: %d):\n%s", pid, resp.StatusCode, p.log)
		}
	}
	syscall.Kill(host, syscall.SIGKILL)
	<-p.exited
	for _, pid := range p.plugins {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		alive := 0
		for _, pid := range p.plugins {
			if !gone(pid) {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d plugin processes outlive SIGTERM after their host died", alive)
		}
	}
}
