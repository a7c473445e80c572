package plugin

import (
	"os"
	"os/signal"
	"syscall"
)

// ignoreHostSignals keeps a SIGTERM sent to the host's whole process group
// (systemd's default KillMode=control-group, `kill -- -PGID`) from killing
// a plugin while its host drains its requests: the host closes its plugins
// itself once its engine has stopped, and a plugin that died first would
// be restarted under a request that was meant to finish. go-plugin ignores
// SIGINT (a terminal's Ctrl-C) for the same reason. A SIGTERM that finds
// the host gone ends the plugin as it would have without this.
func ignoreHostSignals() {
	host := os.Getppid()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	go func() {
		for range ch {
			if os.Getppid() != host {
				signal.Reset(syscall.SIGTERM)
				_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			}
		}
	}()
}
