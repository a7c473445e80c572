package plugin

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// ProtocolVersion is the version of the plugin protocol. It changes whenever
// a request or response changes meaning; host and plugin refuse to talk
// across versions.
//
// Version 2: a matmul Op may carry Ints[1] = 1 (transient weights the plugin
// must drop from its mappings after the batch); version-1 kernels plugins
// reject that, so they are refused at the handshake instead.
//
// Version 3: options are declared (StagerInfo.Options, KernelsInfo.Options)
// and the host calls Stager.Describe before Open, sending only declared
// options; a version-2 stager has no Describe and would be sent none, so
// it is refused at the handshake with an error that says to rebuild it.
const ProtocolVersion = 3

// Handshake is what host and plugin check before anything else. The cookie
// only keeps a plugin binary from being run by hand by mistake; it is not a
// secret.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "K3_PLUGIN_COOKIE",
	MagicCookieValue: "0c0d6e1f3b9a4c57a1e2f0b8d95c7a3e-k3-plugin",
}

// The names under which each contract is dispensed by go-plugin.
const (
	stagerKey  = "stager"
	kernelsKey = "kernels"
)

// ServeStager serves impl to a k3 host over go-plugin and returns when the
// host goes away. It is the whole main function of a third-party stager.
func ServeStager(impl Stager) {
	serve(map[string]goplugin.Plugin{stagerKey: &stagerPlugin{impl: impl}})
}

// ServeKernels serves impl to a k3 host; see ServeStager.
func ServeKernels(impl Kernels) {
	serve(map[string]goplugin.Plugin{kernelsKey: &kernelsPlugin{impl: impl}})
}

func serve(ps map[string]goplugin.Plugin) {
	// go-plugin replaces os.Stderr after Serve starts; logs go to the
	// original one, which the host reads line by line.
	stderr := os.Stderr
	slog.SetDefault(slog.New(newPluginLogHandler(stderr)))
	watchHost(slog.Default())
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         ps,
		GRPCServer:      goplugin.DefaultGRPCServer,
		Logger:          hclog.New(&hclog.LoggerOptions{Output: stderr, JSONFormat: true, Level: hclog.Info}),
	})
}

// newPluginLogHandler writes slog records as the JSON lines go-plugin's
// host side parses (hclog's @level/@message/@timestamp keys), so a plugin's
// slog calls come out of the host's slog with their level and attributes.
func newPluginLogHandler(w io.Writer) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				return slog.String("@level", strings.ToLower(a.Value.String()))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	})
}

// The built-in plugins, registered by the k3 binary (cmd/k3) so that core
// packages can start them by name without importing plugins/.
var (
	builtinMu      sync.Mutex
	builtinStagers = map[string]func() Stager{}
	builtinKernels = map[string]func() Kernels{}
)

// RegisterStager makes a built-in stager available under name, both for
// `k3 plugin NAME` and for in-process use.
func RegisterStager(name string, newImpl func() Stager) {
	builtinMu.Lock()
	defer builtinMu.Unlock()
	builtinStagers[name] = newImpl
}

// RegisterKernels makes built-in kernels available under name.
func RegisterKernels(name string, newImpl func() Kernels) {
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
		ServeStager(s())
	case isKernels:
		ServeKernels(k())
	default:
		return fmt.Errorf("plugin: no built-in plugin %q (have %s)", name, strings.Join(Builtins(), ", "))
	}
	return nil
}
