package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Profile is everything that says how k3 runs a model on a given machine.
// A profile file (configs/*.yaml) sets any subset of it; the rest comes
// from Defaults or, with "auto", from Detect.
type Profile struct {
	// Name identifies the profile in the mode line and in bench records.
	Name string `koanf:"name"`
	// Description says what machine the profile is for and why.
	Description string `koanf:"description"`

	Memory  Memory  `koanf:"memory"`
	Stager  Stager  `koanf:"stager"`
	Kernels Kernels `koanf:"kernels"`

	// Threads is the number of compute threads (0: one per physical core).
	Threads int `koanf:"threads"`
	// Context is the maximum sequence length in tokens.
	Context int `koanf:"context"`
	// Batch is the logical prompt batch (llama.cpp -b); UBatch the physical
	// one (-ub): how many prompt tokens go through a layer together.
	Batch  int `koanf:"batch"`
	UBatch int `koanf:"ubatch"`

	Server Server `koanf:"server"`

	// ShardPath lists directories where shards of a split model may lie
	// besides the first shard's own: shards spread over several drives
	// (the stager reads each drive with its own workers). A flag or
	// variable gives them comma-separated.
	ShardPath []string `koanf:"shard_path"`

	// set holds the keys a profile file, the environment or a flag set
	// (not defaults or auto detection): Load fills it, Explicit reads it.
	set map[string]bool
	// detected says what the auto profile measured (Detected).
	detected []string
}

// Detected says how the auto profile derived what it measured: the
// budget (when no file, variable or flag set it) and the storage probe.
// Empty for other profiles.
func (p *Profile) Detected() string { return strings.Join(p.detected, "; ") }

// Explicit reports whether key ("stager.io_workers") was set by a profile
// file, a K3_* variable or a flag rather than by defaults or detection.
func (p *Profile) Explicit(key string) bool { return p.set[key] }

// Memory bounds what k3 keeps resident.
type Memory struct {
	// Budget is the total resident memory k3 may use: weights it keeps,
	// expert cache, page cache it causes, KV and recurrent state.
	Budget Size `koanf:"budget"`
	// Mlock pins the always-needed weights when they fit in the budget, so
	// the kernel cannot evict them under pressure.
	Mlock bool `koanf:"mlock"`
}

// Stager selects and tunes the staging backend.
type Stager struct {
	// Name is a built-in stager ("pread" or "mmap") or, with Path set, a
	// label for an external one.
	Name string `koanf:"name"`
	// Mode is "process" (a go-plugin subprocess) or "inprocess" (same
	// implementation without IPC, to measure what the boundary costs).
	Mode string `koanf:"mode"`
	// Path names an external plugin binary instead of the built-in one.
	Path string `koanf:"path"`
	// DirectIO is "auto" (O_DIRECT where the filesystem allows it), "on"
	// (fail if it does not) or "off".
	DirectIO string `koanf:"direct_io"`
	// IOWorkers is the number of concurrent readers (queue depth).
	IOWorkers int `koanf:"io_workers"`
	// CachePolicy is the expert-cache eviction policy: "lfru" or "lru".
	CachePolicy string `koanf:"cache_policy"`
	// PrefetchDepth is how many layers ahead speculative hints run (with
	// Lookahead; 0: none): after layer L the routers of L+1 .. L+depth
	// guess their experts from L's hidden state. Further guesses are
	// worse, but give a slow disk more time.
	PrefetchDepth int `koanf:"prefetch_depth"`
	// Lookahead runs layer L+1's router on layer L's hidden state to
	// predict and prefetch L+1's experts (PrefetchDepth layers).
	Lookahead bool `koanf:"lookahead"`
	// LookaheadMode is "adaptive" (a one-token guess is hinted, most
	// confident first, only as far as each rank's measured precision pays
	// for its reads) or "fixed" (every guess, as the router ranks them).
	LookaheadMode string `koanf:"lookahead_mode"`
	// Options are settings of the stager itself, checked against what it
	// declares (plugin.OptionSpec): `options: {warm: false}`.
	Options map[string]any `koanf:"options"`
}

// StagerOptions are the options the host offers the stager: set, which
// it must declare (the stager section's options, and direct_io,
// io_workers, cache_policy where a profile file, variable or flag set
// them), and implied, which it gets only if it declares them (those
// settings' defaults, memory.mlock).
func (p *Profile) StagerOptions() (set, implied map[string]string) {
	set, implied = map[string]string{}, map[string]string{}
	s := p.Stager
	for _, o := range []struct{ key, v string }{
		{"direct_io", s.DirectIO}, {"io_workers", strconv.Itoa(s.IOWorkers)}, {"cache_policy", s.CachePolicy},
	} {
		if p.Explicit("stager." + o.key) {
			set[o.key] = o.v
		} else {
			implied[o.key] = o.v
		}
	}
	implied["mlock"] = strconv.FormatBool(p.Memory.Mlock)
	for k, v := range s.Options {
		set[k] = fmt.Sprint(v)
	}
	return set, implied
}

// Kernels selects the compute backend.
type Kernels struct {
	// Name is "auto" (best the CPU supports), "avx512", "avx2" or
	// "reference" (the core's pure-Go ops), or a label with Path set.
	Name string `koanf:"name"`
	// Mode is "process" or "inprocess", as for the stager.
	Mode string `koanf:"mode"`
	// Path names an external plugin binary.
	Path string `koanf:"path"`
	// Float is the F16/BF16 arithmetic of the SIMD kernels: "exact" (the
	// reference's float32 bit for bit, the default) or "fast" (float32
	// lane sums flushed to float64 every 64 elements: about twice the
	// speed on F16/BF16 matrices, within 2^-21 of Σ|products| of exact;
	// see plugins/internal/kernelkit/fastfloat.go). The reference
	// kernels are always exact.
	Float string `koanf:"float"`
}

// Server holds the HTTP server's settings.
type Server struct {
	Host   string `koanf:"host"`
	Port   int    `koanf:"port"`
	APIKey string `koanf:"api_key"`
	// Alias names the model to clients; comma-separated names are all
	// aliases and the first in sorted order is the model's id
	// (llama-server's --alias a,b). See Aliases.
	Alias string `koanf:"alias"`
	// Tags are informational labels /v1/models lists (llama-server's
	// --tags; a flag gives them comma-separated).
	Tags []string `koanf:"tags"`
	// AllowedHosts are extra names a server without an API key answers in
	// the Host header (a guard against DNS rebinding); "*" allows any. A
	// flag or environment variable gives them comma-separated.
	AllowedHosts []string `koanf:"allowed_hosts"`
	// ShutdownGrace is how long running requests may go on after SIGTERM
	// or SIGINT before they are ended (streams with a final chunk); 0 ends
	// them at once. Written as "10s", "1m30s".
	ShutdownGrace time.Duration `koanf:"shutdown_grace"`
	// CORSOrigins are the origins whose pages may read k3's answers
	// (Access-Control-Allow-Origin); none by default, "*" for any. A flag
	// gives them comma-separated (llama-server's --cors-origins).
	CORSOrigins []string `koanf:"cors_origins"`
	// ChatTemplateFile, when set, replaces the model's chat template
	// (llama-server's --chat-template-file).
	ChatTemplateFile string `koanf:"chat_template_file"`
	// Parallel is the number of sequences (slots) served at once
	// (llama-server's -np): each keeps its conversation's state between
	// requests, and the memory budget reserves state for every one.
	Parallel int `koanf:"parallel"`
	// PrefixCacheMem is the memory the shared prefix cache may take
	// (snapshots of prompt prefixes any slot resumes from), reserved from
	// the budget; 0: none in memory.
	PrefixCacheMem Size `koanf:"prefix_cache_mem"`
	// PrefixCacheDir keeps prefix cache entries on disk too, so they
	// survive a restart; PrefixCacheDiskMax bounds its bytes (0: no bound).
	PrefixCacheDir     string `koanf:"prefix_cache_dir"`
	PrefixCacheDiskMax Size   `koanf:"prefix_cache_disk_max"`
	// Slots serves GET /slots (llama-server's --slots / --no-slots).
	Slots bool `koanf:"slots"`
	// PrefillAssistant continues a conversation's final assistant message
	// instead of starting a new one (llama-server's --prefill-assistant /
	// --no-prefill-assistant; on by default).
	PrefillAssistant bool `koanf:"prefill_assistant"`
	// SPMInfill lays out /infill prompts suffix first (llama-server's
	// --spm-infill).
	SPMInfill bool `koanf:"spm_infill"`
	// Temperature, Seed and NPredict are what a request gets when it does
	// not say (llama-server's --temp, --seed, -n); seed -1 is a random
	// seed per request, n_predict -1 is until the context is full.
	Temperature float64 `koanf:"temperature"`
	Seed        int64   `koanf:"seed"`
	NPredict    int     `koanf:"n_predict"`
	// Reasoning is llama-server's --reasoning: "on" or "off" sets the
	// chat template's enable_thinking for requests that do not set it;
	// "auto" (or empty) leaves the template's default.
	Reasoning string `koanf:"reasoning"`
}

// MaxParallel is the most slots a server keeps.
const MaxParallel = 256

// Defaults returns the settings every profile starts from.
func Defaults() Profile {
	return Profile{
		Name:    "default",
		Memory:  Memory{Budget: 0},
		Stager:  Stager{Name: "pread", Mode: "process", DirectIO: "auto", IOWorkers: 4, CachePolicy: "lfru", PrefetchDepth: 1, Lookahead: true, LookaheadMode: "adaptive"},
		Kernels: Kernels{Name: "auto", Mode: "process", Float: "exact"},
		Threads: 0,
		Context: 4096,
		Batch:   2048,
		UBatch:  512,
		Server: Server{Host: "127.0.0.1", Port: 8080, ShutdownGrace: 10 * time.Second,
			Parallel: 1, Slots: true, PrefillAssistant: true, Temperature: 0.8, Seed: -1, NPredict: -1},
	}
}

var (
	stagerNames    = []string{"pread", "mmap"}
	kernelNames    = []string{"auto", "avx512", "avx2", "reference"}
	modes          = []string{"process", "inprocess"}
	directIOModes  = []string{"auto", "on", "off"}
	floatModes     = []string{"exact", "fast"}
	cachePolicies  = []string{"lfru", "lru"}
	lookaheadModes = []string{"adaptive", "fixed"}
)

func oneOf(field, v string, allowed []string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fmt.Errorf("config: %s: %q is not one of %s", field, v, strings.Join(allowed, ", "))
}

// Validate checks that every setting is usable, naming the key at fault.
func (p *Profile) Validate() error {
	if p.Stager.Path == "" {
		if err := oneOf("stager.name", p.Stager.Name, stagerNames); err != nil {
			return err
		}
	}
	if p.Kernels.Path == "" {
		if err := oneOf("kernels.name", p.Kernels.Name, kernelNames); err != nil {
			return err
		}
	}
	checks := []struct {
		field, v string
		allowed  []string
	}{
		{"stager.mode", p.Stager.Mode, modes},
		{"kernels.mode", p.Kernels.Mode, modes},
		{"kernels.float", p.Kernels.Float, floatModes},
		{"stager.direct_io", p.Stager.DirectIO, directIOModes},
		{"stager.cache_policy", p.Stager.CachePolicy, cachePolicies},
		{"stager.lookahead_mode", p.Stager.LookaheadMode, lookaheadModes},
	}
	for _, c := range checks {
		if err := oneOf(c.field, c.v, c.allowed); err != nil {
			return err
		}
	}
	ints := []struct {
		field     string
		v, lo, hi int
	}{
		{"threads", p.Threads, 0, 4096},
		{"context", p.Context, 1, 1 << 24},
		{"batch", p.Batch, 1, 1 << 20},
		{"ubatch", p.UBatch, 1, 1 << 20},
		{"stager.io_workers", p.Stager.IOWorkers, 1, 1024},
		{"stager.prefetch_depth", p.Stager.PrefetchDepth, 0, 64},
		{"server.port", p.Server.Port, 0, 65535},
	}
	for _, c := range ints {
		if c.v < c.lo || c.v > c.hi {
			return fmt.Errorf("config: %s: %d is outside [%d, %d]", c.field, c.v, c.lo, c.hi)
		}
	}
	if p.UBatch > p.Batch {
		return fmt.Errorf("config: ubatch %d is larger than batch %d", p.UBatch, p.Batch)
	}
	if p.Memory.Budget < 0 {
		return fmt.Errorf("config: memory.budget is negative")
	}
	if p.Server.Host == "" {
		return fmt.Errorf("config: server.host is empty")
	}
	switch p.Server.Reasoning {
	case "", "on", "off", "auto":
	default:
		return fmt.Errorf("config: server.reasoning: %q: want on, off or auto (--reasoning)", p.Server.Reasoning)
	}
	if p.Server.Parallel < 1 || p.Server.Parallel > MaxParallel {
		return fmt.Errorf("config: server.parallel: %d is outside [1, %d] (-np/--parallel)", p.Server.Parallel, MaxParallel)
	}
	if t := p.Server.Temperature; t < 0 || t > 100 || t != t {
		return fmt.Errorf("config: server.temperature: %g is outside [0, 100]", t)
	}
	if p.Server.NPredict < -1 || p.Server.NPredict == 0 {
		return fmt.Errorf("config: server.n_predict: %d must be -1 (until the context is full) or at least 1", p.Server.NPredict)
	}
	if p.Server.ShutdownGrace < 0 {
		return fmt.Errorf("config: server.shutdown_grace: %v is negative", p.Server.ShutdownGrace)
	}
	return nil
}

// ModeLine is the one line every run prints to say how it is running.
func (p *Profile) ModeLine(threads int) string {
	stager := p.Stager.Name
	if p.Stager.Path != "" {
		stager += "@" + p.Stager.Path
	}
	kernels := p.Kernels.Name
	if p.Kernels.Path != "" {
		kernels += "@" + p.Kernels.Path
	}
	budget := "unlimited"
	if p.Memory.Budget > 0 {
		budget = p.Memory.Budget.String()
	}
	kmode := p.Kernels.Mode
	if p.Kernels.Float == "fast" {
		kmode += ",float=fast"
	}
	lookahead := 0
	if p.Stager.Lookahead {
		lookahead = p.Stager.PrefetchDepth
	}
	return fmt.Sprintf("k3: profile=%s stager=%s(%s) kernels=%s(%s) budget=%s direct-io=%s lookahead=%d threads=%d",
		p.Name, stager, p.Stager.Mode, kernels, kmode, budget, p.Stager.DirectIO, lookahead, threads)
}

// Aliases returns the names Alias gives, trimmed, without duplicates, in
// sorted order (llama-server keeps them in a std::set and takes the first
// as the model's id); nil when there is none.
func (s Server) Aliases() []string {
	var out []string
	for _, a := range strings.Split(s.Alias, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EnableThinking is the enable_thinking Reasoning gives requests that do
// not set it; nil leaves the template's default.
func (s Server) EnableThinking() *bool {
	switch s.Reasoning {
	case "on", "off":
		on := s.Reasoning == "on"
		return &on
	}
	return nil
}
