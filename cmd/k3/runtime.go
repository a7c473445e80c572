package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/runtime"
)

// machine is what budgets are fitted to; tests replace it.
var machine = config.Detect

// runtimeOptions completes o with what every command gives the runtime:
// the built-in stagers' sizing, the plugins' environment and logger, and
// warnings printed on stderr.
func runtimeOptions(o runtime.Options, stderr io.Writer) runtime.Options {
	o.Footprints = stagerFootprints
	o.KernelsEnv = kernelsEnv
	o.Logger = slog.Default()
	o.Machine = machine
	o.Warn = func(msg string) { fmt.Fprintf(stderr, "k3: warning: %s\n", msg) }
	return o
}
