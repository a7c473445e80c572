package plugin

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/k3-inference/k3/core/plugin/internal/wire"
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

// The host reaches the client ends of the wire, which live here next to
// the server ends, through wire.Client.
func init() {
	wire.Client.Plugins = func() map[string]goplugin.Plugin {
		return map[string]goplugin.Plugin{wire.StagerKey: &stagerPlugin{}, wire.KernelsKey: &kernelsPlugin{}}
	}
	wire.Client.Doorbell = func(ctx context.Context, raw any, exited func() bool, log *slog.Logger) func() {
		kc, ok := raw.(*kernelsClient)
		if !ok {
			return nil
		}
		kc.db = openDoorbell(ctx, kc.c, exited, log)
		if kc.db == nil {
			return nil
		}
		return kc.db.close
	}
}

// ServeStager serves impl to a k3 host over go-plugin and returns when the
// host goes away. It is the whole main function of a third-party stager.
func ServeStager(impl Stager) {
	serve(map[string]goplugin.Plugin{wire.StagerKey: &stagerPlugin{impl: impl}})
}

// ServeKernels serves impl to a k3 host; see ServeStager.
func ServeKernels(impl Kernels) {
	serve(map[string]goplugin.Plugin{wire.KernelsKey: &kernelsPlugin{impl: impl}})
}

func serve(ps map[string]goplugin.Plugin) {
	// go-plugin replaces os.Stderr after Serve starts; logs go to the
	// original one, which the host reads line by line.
	stderr := os.Stderr
	slog.SetDefault(slog.New(newPluginLogHandler(stderr)))
	watchHost(slog.Default())
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: wire.Handshake(ProtocolVersion),
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
