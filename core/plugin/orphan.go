package plugin

import (
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/k3-inference/k3/core/plugin/internal/wire"
)

// A plugin must not outlive its host, however the host dies (kill -9, a
// panic, the OOM killer): an orphaned stager holds up to the whole expert
// cache in memory and shared-memory files. So the host asks the kernel for
// a signal to the plugin when it dies and tells the plugin its pid
// (wire.HostPIDEnv; both done by core/plugin/host), and the plugin, on that
// signal or when a periodic check finds its parent changed, removes the
// shared memory of its dead host and exits.
//
// The kernel sends the parent-death signal when the *thread* that started
// the child exits, not only the process, and Go may run the start on any
// thread. So the plugin acts on the signal only when its parent really
// changed: a thread of a living host that exits costs nothing, and the
// signal stays armed for the host's own death. The same check keeps a
// SIGTERM sent to the whole process group (a service manager stopping
// k3) from stopping the plugins under a host that is still finishing its
// requests: the host stops them itself, last.

// hostCheckEvery is how often a plugin checks its parent besides the
// signal.
const hostCheckEvery = time.Second

// ownShm holds the shared-memory directories the host gave this plugin
// (a stager's OpenRequest.ShmDir), removed when the host is gone.
var ownShm struct {
	sync.Mutex
	dirs []string
}

func noteShmDir(dir string) {
	if dir == "" {
		return
	}
	ownShm.Lock()
	defer ownShm.Unlock()
	ownShm.dirs = append(ownShm.dirs, dir)
}

// watchHost starts, in a plugin process, the watch for its host: when the
// host named by wire.HostPIDEnv is no longer its parent, it removes the
// plugin's shared memory and the dead host's, and exits. Without
// wire.HostPIDEnv (a host from before it) it does nothing.
func watchHost(log *slog.Logger) {
	host, err := strconv.Atoi(os.Getenv(wire.HostPIDEnv))
	if err != nil || host <= 0 {
		return
	}
	// At once: until then a parent-death signal would end the process
	// with nothing removed.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go waitHostGone(log, host, term)
}

func waitHostGone(log *slog.Logger, host int, term chan os.Signal) {
	// Started through a wrapper (a script that runs the plugin), the
	// parent is not the host: then whether the host lives is the test.
	gone := func() bool { return os.Getppid() != host }
	if os.Getppid() != host {
		gone = func() bool { return !wire.Alive(host) }
	}
	tick := time.NewTicker(hostCheckEvery)
	defer tick.Stop()
	for !gone() {
		select {
		case <-term:
			if !gone() {
				log.Debug("SIGTERM with the host alive: the host stops its plugins itself")
			}
		case <-tick.C:
		}
	}
	// No log line: stderr is a pipe to the dead host, and a write to it
	// would end this process (SIGPIPE) before its files are gone.
	ownShm.Lock()
	for _, d := range ownShm.dirs {
		os.RemoveAll(d)
	}
	ownShm.Unlock()
	// The host's files by its pid: it may not have been reaped yet, and a
	// zombie's pid still answers.
	wire.RemoveShmOf(wire.ShmDir(), host)
	wire.SweepShm(wire.ShmDir())
	os.Exit(1)
}
