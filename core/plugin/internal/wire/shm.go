package wire

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Shared-memory files (arenas, stager slot directories) live in tmpfs, so a
// host killed with SIGKILL would leave their memory allocated until reboot.
// Their names carry the creating host's pid; whoever creates a new one first
// removes those whose host is gone.

// ShmDir is where shared-memory files go: /dev/shm, else the temp dir.
func ShmDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// ShmPattern is the os.CreateTemp / os.MkdirTemp pattern for kind
// ("arena", "stager", "doorbell") owned by this process.
func ShmPattern(kind string) string {
	return "k3-" + kind + "-" + strconv.Itoa(os.Getpid()) + "-*"
}

// SweepShm removes k3 shared-memory files and directories in dir whose
// owning process no longer exists, and returns how many it removed.
func SweepShm(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, ok := ShmOwner(e.Name())
		if !ok || pid == os.Getpid() || Alive(pid) {
			continue
		}
		if os.RemoveAll(filepath.Join(dir, e.Name())) == nil {
			n++
		}
	}
	return n
}

// RemoveShmOf removes the k3 shared-memory files in dir that process pid
// created; a plugin calls it for its host once it knows the host is dead.
func RemoveShmOf(dir string, pid int) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if owner, ok := ShmOwner(e.Name()); !ok || owner != pid {
			continue
		}
		if os.RemoveAll(filepath.Join(dir, e.Name())) == nil {
			n++
		}
	}
	return n
}

// ShmOwner parses "k3-<kind>-<pid>-<random>".
func ShmOwner(name string) (int, bool) {
	parts := strings.Split(name, "-")
	if len(parts) != 4 || parts[0] != "k3" || (parts[1] != "arena" && parts[1] != "stager" && parts[1] != "doorbell") {
		return 0, false
	}
	pid, err := strconv.Atoi(parts[2])
	return pid, err == nil && pid > 0
}

// Alive reports whether pid runs; a zombie (exited, not yet reaped) does
// not.
func Alive(pid int) bool {
	err := unix.Kill(pid, 0)
	if err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no /proc: kill says it is there
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) == 0 || (f[0] != "Z" && f[0] != "X")
}
