package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/runtime"
	"github.com/k3-inference/k3/core/server"
	"github.com/k3-inference/k3/core/server/local"
	"github.com/k3-inference/k3/core/synth"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "serve a model over an OpenAI-compatible HTTP API with a web chat page",
		run:     runServe,
	})
}

// serveFlags maps each profile key to the flag spellings that set it
// (K3Flight's and llama-server's).
var serveFlags = []struct {
	key, usage string
	names      []string
	isInt      bool
}{
	{"server.host", "address to bind, or a path ending in .sock for a Unix socket", []string{"host"}, false},
	{"server.port", "port to listen on", []string{"port"}, true},
	{"server.api_key", "require Authorization: Bearer KEY on every route but /health", []string{"api-key"}, false},
	{"server.alias", "model id shown to clients; comma-separated: aliases, the first in sorted order is the id", []string{"alias", "a"}, false},
	{"server.reasoning", "on or off: the chat template's enable_thinking for requests that do not set it; auto: the template's default", []string{"reasoning", "rea"}, false},
	{"server.tags", "comma-separated informational model tags listed by /v1/models", []string{"tags"}, false},
	{"server.allowed_hosts", "comma-separated host names a server without --api-key answers besides its own (DNS rebinding guard; * for any)", []string{"allowed-hosts"}, false},
	{"server.shutdown_grace", "after SIGTERM or Ctrl-C, how long running requests may finish before they are ended (e.g. 30s; 0: at once; default 10s)", []string{"shutdown-grace"}, false},
	{"server.cors_origins", "comma-separated origins whose web pages may call the API (CORS; none by default, * for any)", []string{"cors-origins"}, false},
	{"server.chat_template_file", "chat template (Jinja) to use instead of the model's", []string{"chat-template-file"}, false},
	{"server.parallel", "slots: sequences served at once, each keeping its conversation's state (the budget reserves state for each)", []string{"np", "parallel"}, true},
	{"server.prefix_cache_mem", "memory for the shared prefix cache (snapshots of prompt prefixes any slot resumes from), e.g. 2G; 0: none", []string{"prefix-cache-mem"}, false},
	{"server.prefix_cache_dir", "directory that keeps prefix cache entries across restarts", []string{"prefix-cache-dir"}, false},
	{"server.prefix_cache_disk_max", "most bytes the prefix cache directory holds, e.g. 20G (least recently used deleted first; 0: no bound)", []string{"prefix-cache-disk-max"}, false},
	{"server.temperature", "temperature of requests that set none (default 0.8)", []string{"temp", "temperature"}, false},
	{"server.seed", "sampling seed of requests that set none (-1: random per request)", []string{"s", "seed"}, true},
	{"server.n_predict", "tokens to generate for requests that set no limit (-1: until the context is full)", []string{"n", "n-predict"}, true},
	{"threads", "compute threads (0: one per physical core)", []string{"t", "threads"}, true},
	{"context", "context size in tokens", []string{"c", "ctx-size"}, true},
	{"batch", "logical prompt batch", []string{"b", "batch-size"}, true},
	{"ubatch", "physical prompt batch (tokens per forward call)", []string{"ub", "ubatch-size"}, true},
	{"memory.budget", "memory budget, e.g. 55G (K3Flight's --cpilot-memory)", []string{"cpilot-memory", "memory-budget"}, false},
	{"shard_path", "comma-separated directories holding shards of a split model that are not next to the first (shards on several drives)", []string{"shard-path"}, false},
}

// serveArgs holds the parsed flags of k3 serve.
type serveArgs struct {
	path, profile *string
	demo          *bool
	maxQueue      *int
	mapped        *bool
	values        map[string]*string // by profile key
	chatTemplate  string             // read from --chat-template-file
}

func newServeFlags(stderr io.Writer) (*flag.FlagSet, *serveArgs) {
	fs := newFlags("serve", stderr)
	a := &serveArgs{values: map[string]*string{}}
	a.path = fs.String("m", "", "model file (first shard of a split model)")
	fs.StringVar(a.path, "model", "", "same as -m")
	a.profile = fs.String("profile", "auto", "hardware profile: a YAML file or auto")
	a.demo = fs.Bool("demo", false, "serve a small synthetic model (random weights) written to the cache directory on first use")
	a.maxQueue = fs.Int("max-queue", 8, "requests that may wait for the engine before new ones get 429")
	a.mapped = fs.Bool("mapped", false, "map the model file directly instead of going through the profile's stager (no memory budget)")
	// Accepted so that llama-server command lines work unchanged: k3 always
	// renders chat templates with its Jinja engine, and /metrics is always
	// on (behind the API key when one is set; it holds counters only, no
	// prompts, and k3's page and monitoring read it).
	fs.Bool("jinja", true, "accepted for llama-server compatibility: k3 always uses Jinja chat templates")
	fs.Bool("metrics", true, "accepted for llama-server compatibility: /metrics is always served")
	fs.Bool("slots", true, "serve GET /slots (the default)")
	fs.Bool("no-slots", false, "do not serve GET /slots (501)")
	fs.Bool("prefill-assistant", true, "continue a conversation's final assistant message (the default)")
	fs.Bool("no-prefill-assistant", false, "treat a final assistant message as finished and start a new one")
	fs.Bool("spm-infill", false, "/infill prompts put the suffix before the prefix (Suffix/Prefix/Middle)")
	for _, f := range serveFlags {
		v := new(string)
		a.values[f.key] = v
		for _, n := range f.names {
			fs.StringVar(v, n, "", f.usage)
		}
	}
	return fs, a
}

func runServe(args []string, stdout, stderr io.Writer) error {
	fs, a := newServeFlags(stderr)
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	set, err := setFlags(fs, a.values)
	if err != nil {
		fmt.Fprintln(stderr, "k3 serve:", err)
		return errUsage
	}
	path := *a.path
	if *a.demo {
		if path, err = demoModel(stderr); err != nil {
			return err
		}
	}
	if path == "" {
		fmt.Fprintln(stderr, "k3 serve: -m is required (or --demo to try a small synthetic model)")
		return errUsage
	}
	prof, err := config.Load(config.Options{Profile: *a.profile, ModelPath: path, Flags: set})
	if err != nil {
		return err
	}
	if f := prof.Server.ChatTemplateFile; f != "" {
		src, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("--chat-template-file: %w", err)
		}
		a.chatTemplate = string(src)
	}
	return serve(path, prof, a, stderr)
}

// setFlags returns the flags that were given, typed, keyed by profile key.
func setFlags(fs *flag.FlagSet, values map[string]*string) (map[string]any, error) {
	set := map[string]any{}
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name { // llama-server's switch pair
		case "slots", "no-slots":
			on := f.Value.String() == "true"
			set["server.slots"] = on == (f.Name == "slots")
		case "spm-infill":
			set["server.spm_infill"] = f.Value.String() == "true"
		case "prefill-assistant", "no-prefill-assistant":
			on := f.Value.String() == "true"
			set["server.prefill_assistant"] = on == (f.Name == "prefill-assistant")
		}
		for _, sf := range serveFlags {
			for _, n := range sf.names {
				if n != f.Name {
					continue
				}
				v := *values[sf.key]
				if !sf.isInt {
					set[sf.key] = v
					continue
				}
				var i int
				if _, e := fmt.Sscan(v, &i); e != nil {
					err = fmt.Errorf("-%s: %q is not an integer", f.Name, v)
				}
				set[sf.key] = i
			}
		}
	})
	return set, err
}

func serve(path string, prof *config.Profile, a *serveArgs, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	opts := server.OptionsFromConfig(*prof)
	opts.MaxQueue, opts.Logger, opts.RequestLog = *a.maxQueue, log, stderr
	srv := server.New(opts, nil)
	ln, err := srv.Listen()
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	done := make(chan struct{})
	defer close(done)
	go handleSignals(ctx, done, stop, srv, log)

	// The port answers at once (/health says 503) while the model loads.
	type loaded struct {
		be  *local.Backend
		err error
	}
	loadc := make(chan loaded, 1)
	go func() {
		start := time.Now()
		log.Info("loading model", "path", path)
		be, err := openBackend(ctx, path, prof, *a.mapped, a.chatTemplate, stderr)
		if err != nil {
			stop(err)
		} else {
			info := be.ModelInfo()
			log.Info("model ready", "id", info.ID, "arch", info.Arch, "context", info.ContextLength,
				"params", info.Params, "bytes", info.Size, "load_seconds", time.Since(start).Seconds())
			srv.SetBackend(be)
		}
		loadc <- loaded{be, err}
	}()
	err = srv.Serve(ctx, ln)
	// Serve has drained: no request runs and none will reach the engine, so
	// its runtime stops now, in order (runtime.Close): the stager, the
	// kernels, the model file. Each plugin's shared memory goes with it.
	l := <-loadc // a load still under way sees ctx cancelled
	if l.be != nil {
		if cerr := l.be.Close(); cerr != nil {
			log.Warn("closing the model", "err", cerr)
		}
	}
	log.Info("stopped")
	if l.err != nil && !errors.Is(l.err, context.Canceled) {
		return fmt.Errorf("loading %s: %w", path, l.err)
	}
	return err
}

// handleSignals stops the server on SIGINT or SIGTERM: the first starts a
// graceful shutdown (running requests get the grace period), a second ends
// the running requests at once (still a clean exit), a third ends the
// process on the spot. It returns when done is closed (serve returns).
func handleSignals(ctx context.Context, done <-chan struct{}, stop context.CancelCauseFunc, srv *server.Server, log *slog.Logger) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	select {
	case sig := <-sigs:
		log.Info("stopping: running requests may finish within the grace period; a second signal ends them now", "signal", sig.String())
		stop(fmt.Errorf("%v", sig))
	case <-ctx.Done(): // the model failed to load
	case <-done:
		return
	}
	select {
	case <-sigs:
		log.Warn("second signal: ending the running requests now; a third quits at once")
		srv.EndGrace()
	case <-done:
		return
	}
	signal.Stop(sigs) // the default action again: a third signal ends the process
	<-done
}

// openBackend loads the model through the profile's stager, within its
// memory budget (or, with mapped, on a plain mapping of the file), and
// with chatTemplate (when set) instead of the model's template,
// wraps it in an engine for the server. It prints the mode line. The
// backend's Close stops the runtime: the stager, the kernels, the file.
func openBackend(ctx context.Context, path string, prof *config.Profile, mapped bool, chatTemplate string, stderr io.Writer) (*local.Backend, error) {
	rt, err := runtime.Open(ctx, path, prof, runtimeOptions(runtime.Options{Mapped: mapped}, stderr))
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(stderr, rt.Mode)
	be, err := local.FromRuntime(rt, local.Options{ID: server.OptionsFromConfig(*prof).Alias, ChatTemplate: chatTemplate})
	if err != nil {
		rt.Close()
		return nil, err
	}
	return be, nil
}

// demoModel writes the tiny synthetic checkpoint into the user's cache
// directory once and returns its path.
func demoModel(stderr io.Writer) (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "k3", "demo")
	path := filepath.Join(dir, "k3-synth-tiny.gguf")
	fmt.Fprintln(stderr, "k3: --demo serves a tiny synthetic kimi-k3 model: its weights are RANDOM, so its replies are noise.")
	fmt.Fprintln(stderr, "k3: it shows the whole path working; for a real model run: k3 serve -m MODEL-00001-of-000NN.gguf")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	cfg, _ := synth.Preset("tiny")
	cfg.Type = synth.TypeQ2_K
	tmp := filepath.Join(dir, "k3-synth-tiny.tmp.gguf")
	if _, err := synth.Write(tmp, cfg, synth.WriteOptions{}); err != nil {
		return "", fmt.Errorf("demo: writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintln(stderr, "k3: wrote", path)
	return path, nil
}
