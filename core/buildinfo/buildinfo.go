// Package buildinfo says which k3 this binary is: module version, VCS
// revision and dirty flag, commit time, Go version and target, read from
// the build information the Go toolchain stamps into every binary. `k3
// version`, the mode line and the server's /metrics report it, so a bench
// record or a bug report names the exact build.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// version overrides the module version; release builds set it with
// -ldflags "-X github.com/k3-inference/k3/core/buildinfo.version=v1.2.3"
// (tools/release/build.sh), since `go build` of a checkout stamps only a
// pseudo-version.
var version string

// Info is one build's identity.
type Info struct {
	// Version is the module version: the release's tag, a pseudo-version
	// (v0.0.0-DATE-REV[+dirty]) for a plain build of a checkout, or
	// "(devel)" where the toolchain knew no VCS.
	Version string `json:"version"`
	// Revision is the VCS commit ("" when built without VCS information,
	// e.g. by go test or with -buildvcs=false) and Dirty whether the work
	// tree had uncommitted changes.
	Revision string `json:"revision,omitempty"`
	Dirty    bool   `json:"dirty"`
	// Time is the commit's time (RFC 3339); a build's own time would make
	// two builds of one commit differ, so the binary carries none.
	Time string `json:"commit_time,omitempty"`
	// Go is the toolchain; OS and Arch the target.
	Go   string `json:"go"`
	OS   string `json:"os"`
	Arch string `json:"arch"`
	// Settings are the build settings that change the code compiled:
	// -tags, CGO_ENABLED, GOAMD64/GOARM64, -trimpath.
	Settings map[string]string `json:"settings,omitempty"`
}

var (
	once   sync.Once
	cached Info
)

// Get returns this binary's Info.
func Get() Info {
	once.Do(func() {
		bi, _ := debug.ReadBuildInfo()
		cached = fromBuildInfo(bi, version)
	})
	return cached
}

// fromBuildInfo reads bi (nil: none) with override as the version when set.
func fromBuildInfo(bi *debug.BuildInfo, override string) Info {
	i := Info{Version: "(devel)", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi == nil {
		if override != "" {
			i.Version = override
		}
		return i
	}
	if bi.Main.Version != "" {
		i.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		i.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			i.Dirty = s.Value == "true"
		case "vcs.time":
			i.Time = s.Value
		case "GOOS":
			i.OS = s.Value
		case "GOARCH":
			i.Arch = s.Value
		case "-tags", "CGO_ENABLED", "GOAMD64", "GOARM64", "-trimpath":
			if i.Settings == nil {
				i.Settings = map[string]string{}
			}
			i.Settings[s.Key] = s.Value
		}
	}
	if override != "" {
		i.Version = override
	}
	return i
}

// ShortRevision is the first 12 hex digits of the revision, with "-dirty"
// for a modified tree; "unknown" without VCS information.
func (i Info) ShortRevision() string {
	r := i.Revision
	if r == "" {
		return "unknown"
	}
	if len(r) > 12 {
		r = r[:12]
	}
	if i.Dirty {
		r += "-dirty"
	}
	return r
}

// String is the one-line form: "k3 VERSION (REVISION) GO OS/ARCH".
func (i Info) String() string {
	return strings.Join([]string{"k3", i.Version, "(" + i.ShortRevision() + ")", i.Go, i.OS + "/" + i.Arch}, " ")
}
