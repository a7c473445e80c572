package wire

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSweepShmRemovesOnlyDeadOwners(t *testing.T) {
	dir := t.TempDir()
	// A pid that has certainly exited: a child we ran and reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true(1):", err)
	}
	dead := strconv.Itoa(cmd.Process.Pid)
	mine := strconv.Itoa(os.Getpid())
	parent := strconv.Itoa(os.Getppid())
	names := map[string]bool{ // name -> should survive
		"k3-arena-" + dead + "-123":  false,
		"k3-stager-" + dead + "-456": false,
		"k3-doorbell-" + dead + "-7": false,
		"k3-doorbell-" + mine + "-8": true,
		"k3-arena-" + mine + "-789":  true,
		"k3-stager-" + parent + "-1": true,
		"k3-arena-notapid-1":         true,
		"other-" + dead + "-1":       true,
		"k3-arena-1234567":           true, // old unnamed form: not ours to judge
	}
	for n := range names {
		p := filepath.Join(dir, n)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(p, "slots"), []byte("x"), 0o600)
	}
	if got := SweepShm(dir); got != 3 {
		t.Errorf("removed %d, want 3", got)
	}
	for n, keep := range names {
		_, err := os.Stat(filepath.Join(dir, n))
		if exists := err == nil; exists != keep {
			t.Errorf("%s: exists=%v, want %v", n, exists, keep)
		}
	}
}

// TestSweepShmZombieOwner: the files of a host that exited but was not
// reaped yet (its pid still answers kill 0) are swept too.
func TestSweepShmZombieOwner(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skip("no true(1):", err)
	}
	defer cmd.Wait()
	pid := cmd.Process.Pid
	zombie := func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err == nil && strings.Contains(string(stat), ") Z ")
	}
	for deadline := time.Now().Add(10 * time.Second); !zombie(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Skip("no zombie to be seen in /proc")
		}
	}
	name := filepath.Join(dir, "k3-stager-"+strconv.Itoa(pid)+"-1")
	if err := os.Mkdir(name, 0o700); err != nil {
		t.Fatal(err)
	}
	if got := SweepShm(dir); got != 1 {
		t.Errorf("removed %d, want the zombie's directory", got)
	}
}
