package host

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/k3-inference/k3/core/plugin"
)

// The built-in plugins, registered by the k3 binary (cmd/k3) so that core
// packages can start them by name without importing plugins/.
var (
	builtinMu      sync.Mutex
	builtinStagers = map[string]func() plugin.Stager{}
	builtinKernels = map[string]func() plugin.Kernels{}
)

// RegisterStager makes a built-in stager available under name, both for
// `k3 plugin NAME` and for in-process use.
func RegisterStager(name string, newImpl func() plugin.Stager) {
	builtinMu.Lock()
	defer builtinMu.Unlock()
	builtinStagers[name] = newImpl
}

// RegisterKernels makes built-in kernels available under name.
func RegisterKernels(name string, newImpl func() plugin.Kernels) {
	builtinMu.Lock()
	defer builtinMu.Unlock()
	builtinKernels[name] = newImpl
}

// Builtins lists the registered plugin names, sorted.
func Builtins() []string {
	builtinMu.Lock()
	defer builtinMu.Unlock()
	var names []string
	for n := range builtinStagers {
		names = append(names, n)
	}
	for n := range builtinKernels {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ServeBuiltin serves the built-in plugin called name; it is what
// `k3 plugin NAME` runs in the re-executed binary.
func ServeBuiltin(name string) error {
	builtinMu.Lock()
	s, isStager := builtinStagers[name]
	k, isKernels := builtinKernels[name]
	builtinMu.Unlock()
	switch {
	case isStager:
		plugin.ServeStager(s())
	case isKernels:
		plugin.ServeKernels(k())
	default:
		return fmt.Errorf("plugin: no built-in plugin %q (have %s)", name, strings.Join(Builtins(), ", "))
	}
	return nil
}
