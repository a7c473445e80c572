package host

import "github.com/k3-inference/k3/core/plugin/internal/wire"

// Shared-memory files (arenas, stager slot directories, doorbells) live in
// tmpfs, so a host killed with SIGKILL would leave their memory allocated
// until reboot. Their names carry the creating host's pid; whoever creates
// a new one first removes those whose host is gone, and a plugin whose
// host died removes its host's.

// ShmDir is where shared-memory files go: /dev/shm, else the temp dir.
func ShmDir() string { return wire.ShmDir() }

// SweepShm removes k3 shared-memory files and directories in dir whose
// owning process no longer exists, and returns how many it removed.
func SweepShm(dir string) int { return wire.SweepShm(dir) }

// ErrUnavailable marks a call that failed because the plugin process could
// not be reached (it died or is restarting), as opposed to an error the
// plugin returned. A supervisor restarts the plugin on it.
var ErrUnavailable = wire.ErrUnavailable

// DoorbellEnv set to "off" in the host's environment keeps every Execute
// to a kernels plugin on gRPC; in a plugin's, it refuses the doorbell as an
// older plugin does. (The SDK reads the same name, wire.DoorbellEnv.)
const DoorbellEnv = "K3_PLUGIN_DOORBELL"
