package runtime

import (
	"fmt"
	"strings"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/plugin/host"
)

// Mode is how a runtime runs, the facts of the line every command prints
// (String) and k3 bench records.
type Mode struct {
	// Profile is the profile's name; "none" without one.
	Profile string
	// Stager is the stager's name (with @path for an external binary) and
	// StagerMode process or inprocess; "none" and "" on a plain mapping of
	// the file.
	Stager, StagerMode string
	// StagerSays is the stager's description of itself.
	StagerSays string
	// StagerOptions are the options the stager was opened with (every one
	// it declares, defaults filled in); nil on a plain mapping.
	StagerOptions map[string]string
	// Budget is the memory budget after fitting it to the machine; 0:
	// unlimited (a plain mapping, or a profile without one).
	Budget config.Size
	// DirectIO is the profile's direct I/O setting ("off" on a plain
	// mapping); Lookahead how many layers ahead experts are guessed.
	DirectIO  string
	Lookahead int
	Threads   int
	// Slots are the sequences an engine keeps; PrefixCache the memory of
	// the shared prefix cache and PrefixCacheDir its directory ("": none).
	Slots          int
	PrefixCache    config.Size
	PrefixCacheDir string
	// Split is how the budget divides between the core and the stager
	// (nil on a plain mapping).
	Split *engine.Budget
	// Kernels is the backend that runs the matrix products, as it names
	// itself (engine.Kernels.Name: plugin, CPU level, process or
	// inprocess).
	Kernels string
	// Detected is how the auto profile derived its budget and I/O
	// settings (config.Profile.Detected); empty otherwise.
	Detected string
	// Version and Revision are the binary's (core/buildinfo), so a logged
	// or recorded mode line names the build that ran.
	Version, Revision string
}

// String is the mode line. The kernels come last: their name has spaces.
func (m Mode) String() string {
	var b strings.Builder
	stager := m.Stager
	if m.StagerMode != "" {
		stager += "(" + m.StagerMode + ")"
	}
	budget := "unlimited"
	if m.Budget > 0 {
		budget = m.Budget.String()
	}
	fmt.Fprintf(&b, "k3: profile=%s stager=%s budget=%s direct-io=%s lookahead=%d threads=%d slots=%d",
		m.Profile, stager, budget, m.DirectIO, m.Lookahead, m.Threads, max(m.Slots, 1))
	if m.PrefixCache > 0 || m.PrefixCacheDir != "" {
		fmt.Fprintf(&b, " prefix-cache=%s", m.PrefixCache)
		if m.PrefixCacheDir != "" {
			b.WriteString("+disk")
		}
	}
	if s := m.Split; s != nil {
		fmt.Fprintf(&b, " always-needed=%s step-pin=%s(%dx%s) state-reserve=%s prefill-chunk=%d activations=%s(%dx%s+%s) stager-budget=%s",
			config.Size(s.Resident), config.Size(s.StepPin()), s.Group(), config.Size(s.Unit), config.Size(s.State), s.Chunk,
			config.Size(s.Activations), s.Chunk, config.Size(s.ActivationsPerToken), config.Size(s.Activations-int64(s.Chunk)*s.ActivationsPerToken), config.Size(s.Stager))
	}
	if m.Split != nil {
		fmt.Fprintf(&b, " stager-options=%s", host.FormatOptions(m.StagerOptions))
	}
	if m.StagerSays != "" {
		fmt.Fprintf(&b, " stager-mode=%q", m.StagerSays)
	}
	if m.Detected != "" {
		fmt.Fprintf(&b, " detected=%q", m.Detected)
	}
	if m.Version != "" {
		fmt.Fprintf(&b, " version=%s revision=%s", m.Version, m.Revision)
	}
	fmt.Fprintf(&b, " kernels=%s", m.Kernels)
	return b.String()
}
