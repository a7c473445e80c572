package host

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/internal/wire"
)

// Launch says how to start one plugin.
type Launch struct {
	// Name is a built-in plugin ("staging-pread") or, with Path set, a label
	// for an external one. Log lines from the plugin carry it.
	Name string
	// Path is an external plugin binary. Empty: re-execute this binary as
	// `k3 plugin Name`, so a release is one file.
	Path string
	// Args are the arguments for Path (ignored without it).
	Args []string
	// Env is added to the plugin's environment.
	Env []string
	// InProcess runs the built-in implementation in this process with no
	// IPC at all: the same code, to measure what the boundary costs.
	InProcess bool
	// Logger receives the plugin's log lines (default slog.Default()).
	Logger *slog.Logger
}

func (l Launch) logger() *slog.Logger {
	if l.Logger != nil {
		return l.Logger
	}
	return slog.Default()
}

func (l Launch) command() (*exec.Cmd, error) {
	var cmd *exec.Cmd
	if l.Path != "" {
		cmd = exec.Command(l.Path, l.Args...)
	} else {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("plugin %s: finding this binary to re-execute: %w", l.Name, err)
		}
		cmd = exec.Command(exe, "plugin", l.Name)
	}
	cmd.Env = append(os.Environ(), l.Env...)
	setHostDeath(cmd)
	return cmd, nil
}

// setHostDeath prepares cmd so that the plugin learns of its host's death.
func setHostDeath(cmd *exec.Cmd) {
	// go-plugin appends the host's own environment after cmd.Env: a
	// stale value there (a host started from a plugin's environment) would
	// win and name a host that is not this one.
	os.Unsetenv(wire.HostPIDEnv)
	cmd.Env = append(cmd.Env, wire.HostPIDEnv+"="+strconv.Itoa(os.Getpid()))
	parentDeathSignal(cmd, syscall.SIGTERM)
}

// Process is a running plugin subprocess. A nil *Process stands for an
// in-process plugin, and its methods are no-ops.
type Process struct {
	name   string
	client *goplugin.Client
	// closeDoorbell closes the Execute fast path of a kernels plugin that
	// took it (nil: none).
	closeDoorbell func()
}

// Pid is the plugin's process id, or 0 in-process.
func (p *Process) Pid() int {
	if p == nil || p.client == nil {
		return 0
	}
	if rc := p.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Exited reports whether the plugin process has exited.
func (p *Process) Exited() bool { return p != nil && p.client.Exited() }

// Kill stops the plugin: gracefully if it answers, by force otherwise.
func (p *Process) Kill() {
	if p != nil {
		p.client.Kill()
		if p.closeDoorbell != nil {
			p.closeDoorbell() // after the kill, so a call in flight returns
		}
	}
}

// Doorbell reports whether Execute calls to this kernels plugin go through
// shared memory rather than gRPC (see DoorbellEnv).
func (p *Process) Doorbell() bool { return p != nil && p.closeDoorbell != nil }

// StartStager starts the stager l names and returns it with its process
// (nil in-process).
func StartStager(ctx context.Context, l Launch) (plugin.Stager, *Process, error) {
	if l.InProcess {
		builtinMu.Lock()
		newImpl, ok := builtinStagers[l.Name]
		builtinMu.Unlock()
		if !ok {
			return nil, nil, fmt.Errorf("plugin: no built-in stager %q", l.Name)
		}
		return newImpl(), nil, nil
	}
	raw, p, err := start(ctx, l, wire.StagerKey)
	if err != nil {
		return nil, nil, err
	}
	s, ok := raw.(plugin.Stager)
	if !ok {
		p.Kill()
		return nil, nil, fmt.Errorf("plugin %s: dispensed %T, not a Stager", l.Name, raw)
	}
	return s, p, nil
}

// StartKernels starts the kernels l names; see StartStager.
func StartKernels(ctx context.Context, l Launch) (plugin.Kernels, *Process, error) {
	if l.InProcess {
		builtinMu.Lock()
		newImpl, ok := builtinKernels[l.Name]
		builtinMu.Unlock()
		if !ok {
			return nil, nil, fmt.Errorf("plugin: no built-in kernels %q", l.Name)
		}
		return newImpl(), nil, nil
	}
	raw, p, err := start(ctx, l, wire.KernelsKey)
	if err != nil {
		return nil, nil, err
	}
	k, ok := raw.(plugin.Kernels)
	if !ok {
		p.Kill()
		return nil, nil, fmt.Errorf("plugin %s: dispensed %T, not Kernels", l.Name, raw)
	}
	p.closeDoorbell = wire.Client.Doorbell(ctx, raw, p.Exited, l.logger().With("plugin", l.Name))
	return k, p, nil
}

// pluginVersion finds the plugin's protocol version in go-plugin's
// handshake error.
var pluginVersion = regexp.MustCompile(`(?i)incompatible API version with plugin\. Plugin version: (\d+)`)

// versionError explains a handshake refused for its protocol version: a
// plugin built against another SDK than this host's.
func versionError(err error) error {
	m := pluginVersion.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	return fmt.Errorf("the plugin speaks protocol %s and this k3 speaks %d: rebuild it against an SDK of protocol %d (see docs/plugins.md, Protocol versions): %w",
		m[1], plugin.ProtocolVersion, plugin.ProtocolVersion, err)
}

func start(ctx context.Context, l Launch, key string) (any, *Process, error) {
	cmd, err := l.command()
	if err != nil {
		return nil, nil, err
	}
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  wire.Handshake(plugin.ProtocolVersion),
		Plugins:          map[string]goplugin.Plugin{key: wire.Client.Plugins()[key]},
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		Logger:           newHostLogger(l.logger(), l.Name),
		StartTimeout:     30 * time.Second,
	})
	p := &Process{name: l.Name, client: client}
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, nil, fmt.Errorf("plugin %s: start: %w", l.Name, versionError(err))
	}
	raw, err := rpc.Dispense(key)
	if err != nil {
		client.Kill()
		return nil, nil, fmt.Errorf("plugin %s: dispense %s: %w", l.Name, key, err)
	}
	if err := ctx.Err(); err != nil {
		client.Kill()
		return nil, nil, err
	}
	return raw, p, nil
}

// newHostLogger returns the hclog.Logger go-plugin writes the plugin's
// stderr to, forwarding every line to log with the plugin's name.
func newHostLogger(log *slog.Logger, name string) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: discard{}, Level: hclog.Debug})
	l.RegisterSink(&slogSink{log: log.With("plugin", name)})
	return l
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// slogSink adapts hclog's sink interface to slog.
type slogSink struct{ log *slog.Logger }

func (s *slogSink) Accept(_ string, level hclog.Level, msg string, args ...any) {
	var kept []any
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == "timestamp" {
			continue // go-plugin adds the plugin's clock; slog has its own
		}
		kept = append(kept, args[i], args[i+1])
	}
	s.log.Log(context.Background(), slogLevel(level), msg, kept...)
}

func slogLevel(l hclog.Level) slog.Level {
	switch {
	case l >= hclog.Error:
		return slog.LevelError
	case l == hclog.Warn:
		return slog.LevelWarn
	case l == hclog.Info:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
