package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
)

// stageFlags are the flags that select a profile and override its
// staging settings; each sets the profile key it names.
type stageFlags struct {
	profile *string
	values  map[string]*string
	fs      *flag.FlagSet
}

var stageFlagKeys = []struct{ name, key, usage string }{
	{"cpilot-memory", "memory.budget", "memory budget in GiB (K3Flight's spelling; a size such as 2G also works)"},
	{"memory-budget", "memory.budget", "memory budget, e.g. 2G or 512MiB"},
	{"stager", "stager.name", "staging backend: pread or mmap"},
	{"stager-mode", "stager.mode", "process (a `k3 plugin` subprocess) or inprocess"},
	{"stager-path", "stager.path", "an external stager plugin binary"},
	{"direct-io", "stager.direct_io", "auto, on or off"},
	{"io-workers", "stager.io_workers", "concurrent storage readers"},
	{"lookahead", "stager.lookahead", "predict the next layers' experts and prefetch them (true or false)"},
	{"prefetch-depth", "stager.prefetch_depth", "how many layers ahead lookahead guesses (0: none)"},
	{"lookahead-mode", "stager.lookahead_mode", "adaptive (guesses only as far as their measured precision pays) or fixed (every guess)"},
	{"shard-path", "shard_path", "comma-separated directories holding shards of a split model that are not next to the first (shards on several drives)"},
}

func addStageFlags(fs *flag.FlagSet) *stageFlags {
	sf := &stageFlags{values: map[string]*string{}, fs: fs}
	sf.profile = fs.String("profile", "", "hardware profile (a YAML file or auto): weights come through its stager within its memory budget; empty: map the file directly, no budget")
	for _, f := range stageFlagKeys {
		v := new(string)
		sf.values[f.name] = v
		fs.StringVar(v, f.name, "", f.usage)
	}
	return sf
}

// load returns the profile the flags select, or nil for the plain mapped
// path (no --profile and no staging flag).
func (sf *stageFlags) load(path string) (*config.Profile, error) {
	set := map[string]any{}
	var err error
	sf.fs.Visit(func(f *flag.Flag) {
		v, ok := sf.values[f.Name]
		if !ok {
			return
		}
		for _, k := range stageFlagKeys {
			if k.name != f.Name {
				continue
			}
			val := any(*v)
			switch k.key {
			case "memory.budget":
				if f.Name == "cpilot-memory" && isDigits(*v) {
					val = *v + "G"
				}
			case "stager.io_workers", "stager.prefetch_depth":
				n, e := strconv.Atoi(*v)
				if e != nil {
					err = fmt.Errorf("--%s: %q is not an integer", f.Name, *v)
				}
				val = n
			case "stager.lookahead":
				b, e := strconv.ParseBool(*v)
				if e != nil {
					err = fmt.Errorf("--%s: %q is not true or false", f.Name, *v)
				}
				val = b
			}
			set[k.key] = val
		}
	})
	if err != nil {
		return nil, err
	}
	if *sf.profile == "" && len(set) == 0 {
		return nil, nil
	}
	return config.Load(config.Options{Profile: *sf.profile, ModelPath: path, Flags: set})
}

func isDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// stagerReport is the stager's part of a run's numbers, printed as JSON.
type stagerReport struct {
	Stager             string  `json:"stager"`
	Restarts           int     `json:"restarts"`
	Hits               uint64  `json:"hits"`
	Misses             uint64  `json:"misses"`
	HitRate            float64 `json:"hit_rate"`
	BytesRead          int64   `json:"bytes_read"`
	DecodeTokens       int     `json:"decode_tokens"`
	DecodeBytesRead    int64   `json:"decode_bytes_read"`
	BytesReadPerToken  float64 `json:"decode_bytes_read_per_token"`
	DecodeSeconds      float64 `json:"decode_s"`
	DecodeWaitSeconds  float64 `json:"decode_wait_s"`
	WaitShare          float64 `json:"decode_wait_share"`
	AcquireShare       float64 `json:"decode_acquire_share"`
	ReadSeconds        float64 `json:"read_s"`
	ResidentBytes      int64   `json:"resident_bytes"`
	BudgetBytes        int64   `json:"budget_bytes"`
	DirectIO           bool    `json:"direct_io"`
	LookaheadPredicted uint64  `json:"lookahead_predicted"`
	LookaheadPrecision float64 `json:"lookahead_precision"`
}

// newStagerReport sums up a run: end is the stager's counters at the end,
// atDecode when decoding began; decode is the decode phase's wall time
// over tokens forward calls.
func newStagerReport(end, atDecode engine.StageStats, tokens int, decode time.Duration) stagerReport {
	r := stagerReport{
		Stager: end.Mode, Restarts: end.Restarts, Hits: end.Hits, Misses: end.Misses, BytesRead: end.BytesRead,
		DecodeTokens: tokens, DecodeBytesRead: end.BytesRead - atDecode.BytesRead, DecodeSeconds: decode.Seconds(),
		DecodeWaitSeconds: (end.WaitTime - atDecode.WaitTime).Seconds(), ReadSeconds: end.ReadTime.Seconds(),
		ResidentBytes: end.ResidentBytes, BudgetBytes: end.BudgetBytes, DirectIO: end.DirectIO,
		LookaheadPredicted: end.Predicted, LookaheadPrecision: end.Precision(),
	}
	if n := end.Hits + end.Misses; n > 0 {
		r.HitRate = float64(end.Hits) / float64(n)
	}
	if tokens > 0 {
		r.BytesReadPerToken = float64(r.DecodeBytesRead) / float64(tokens)
	}
	if decode > 0 {
		r.WaitShare = r.DecodeWaitSeconds / decode.Seconds()
		r.AcquireShare = (end.AcquireTime - atDecode.AcquireTime).Seconds() / decode.Seconds()
	}
	return r
}

func printStagerReport(w io.Writer, r stagerReport) error {
	b, err := json.Marshal(struct {
		Stats stagerReport `json:"stager_stats"`
	}{r})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
