package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/k3-inference/k3", Version: "v0.0.0-20261202053000-82b1dd7abcde+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"}, {Key: "CGO_ENABLED", Value: "0"},
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"}, {Key: "-ldflags", Value: "-buildid="},
			{Key: "vcs.revision", Value: "82b1dd7abcdef0123456789abcdef0123456789a"},
			{Key: "vcs.time", Value: "2026-12-02T05:30:00Z"}, {Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		override string
		want     Info
	}{
		{"checkout", bi, "", Info{Version: "v0.0.0-20261202053000-82b1dd7abcde+dirty", Revision: "82b1dd7abcdef0123456789abcdef0123456789a",
			Dirty: true, Time: "2026-12-02T05:30:00Z", Go: "go1.26.0", OS: "linux", Arch: "arm64",
			Settings: map[string]string{"-trimpath": "true", "CGO_ENABLED": "0"}}},
		{"release", bi, "v1.2.3", Info{Version: "v1.2.3", Revision: "82b1dd7abcdef0123456789abcdef0123456789a",
			Dirty: true, Time: "2026-12-02T05:30:00Z", Go: "go1.26.0", OS: "linux", Arch: "arm64",
			Settings: map[string]string{"-trimpath": "true", "CGO_ENABLED": "0"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, fromBuildInfo(tc.bi, tc.override)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if got := fromBuildInfo(bi, "").String(); got != "k3 v0.0.0-20261202053000-82b1dd7abcde+dirty (82b1dd7abcde-dirty) go1.26.0 linux/arm64" {
		t.Errorf("String() = %q", got)
	}
	if got := fromBuildInfo(nil, "").ShortRevision(); got != "unknown" {
		t.Errorf("without build info: revision %q", got)
	}
}

// TestGet: a test binary has build info; Get reads it without VCS data.
func TestGet(t *testing.T) {
	i := Get()
	if i.Version == "" || !strings.HasPrefix(i.Go, "go") || i.OS == "" || i.Arch == "" {
		t.Errorf("Get() = %+v", i)
	}
}
