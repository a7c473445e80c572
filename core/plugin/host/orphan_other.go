//go:build !linux

package host

import (
	"os/exec"
	"syscall"
)

// parentDeathSignal: no such signal here; the plugin's periodic check of
// its parent does the work alone.
func parentDeathSignal(*exec.Cmd, syscall.Signal) {}
