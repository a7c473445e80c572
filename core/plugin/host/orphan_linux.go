package host

import (
	"os/exec"
	"syscall"
)

// parentDeathSignal has the kernel send sig to the child when the thread
// that starts it exits (PR_SET_PDEATHSIG).
func parentDeathSignal(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
}
