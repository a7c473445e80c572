// Package wire is what the two halves of the plugin SDK share and neither
// exports: core/plugin (the plugin's side: Serve and the wire's ends) and
// core/plugin/host (the host's side: launch, supervision, arenas). It holds
// the go-plugin handshake, the names contracts are dispensed under, the
// environment variables between host and plugin, the shared-memory file
// names both sides create and sweep, and the host's entry to the client
// ends of the wire, which core/plugin sets when it is initialised (host
// imports core/plugin, so that is always done before host runs).
package wire

import (
	"context"
	"errors"
	"log/slog"

	goplugin "github.com/hashicorp/go-plugin"
)

// Handshake is what host and plugin check before anything else, at
// protocol version (core/plugin's ProtocolVersion). The cookie only keeps a
// plugin binary from being run by hand by mistake; it is not a secret.
func Handshake(version uint) goplugin.HandshakeConfig {
	return goplugin.HandshakeConfig{
		ProtocolVersion:  version,
		MagicCookieKey:   "K3_PLUGIN_COOKIE",
		MagicCookieValue: "0c0d6e1f3b9a4c57a1e2f0b8d95c7a3e-k3-plugin",
	}
}

// The names under which each contract is dispensed by go-plugin.
const (
	StagerKey  = "stager"
	KernelsKey = "kernels"
)

// HostPIDEnv names the variable that carries the host's pid to a plugin.
const HostPIDEnv = "K3_PLUGIN_HOST_PID"

// DoorbellEnv set to "off" in the host's environment keeps every Execute
// on gRPC; in a plugin's, it refuses the doorbell as an older plugin does.
const DoorbellEnv = "K3_PLUGIN_DOORBELL"

// ErrUnavailable marks a call that failed because the plugin process could
// not be reached (it died or is restarting), as opposed to an error the
// plugin returned. A supervisor restarts the plugin on it.
var ErrUnavailable = errors.New("plugin unavailable")

// Client is the host's entry to the client ends of the wire, which live in
// core/plugin next to the server ends they are tested against. core/plugin
// sets it at initialisation.
var Client struct {
	// Plugins are the go-plugin bindings a host dispenses the contracts
	// with (StagerKey, KernelsKey).
	Plugins func() map[string]goplugin.Plugin
	// Doorbell offers the Execute fast path to the kernels client raw (as
	// dispensed) and returns its close function, or nil when the plugin
	// stays on gRPC. exited reports whether the plugin process is gone.
	Doorbell func(ctx context.Context, raw any, exited func() bool, log *slog.Logger) (close func())
}
