package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/k3-inference/k3/core/buildinfo"
	kernelsavx2 "github.com/k3-inference/k3/plugins/kernels-avx2"
	kernelsavx512 "github.com/k3-inference/k3/plugins/kernels-avx512"
)

func init() {
	register(&command{
		name:    "version",
		summary: "print the version, commit, Go version and the kernel levels compiled in (--json)",
		run:     runVersion,
	})
}

// versionJSON is `k3 version --json`: the build (core/buildinfo) and what
// its kernels can run.
type versionJSON struct {
	buildinfo.Info
	// SIMD names the instruction sets whose assembly this build contains
	// (none on arm64 or with the noasm tag: every kernel is the pure-Go
	// reference there).
	SIMD []string `json:"simd_compiled"`
	// Kernels are the built-in kernels plugins' levels usable on this CPU,
	// "generic" (the pure-Go reference) first.
	Kernels map[string][]string `json:"kernel_levels"`
}

func versionInfo() versionJSON {
	return versionJSON{
		Info: buildinfo.Get(),
		SIMD: simdCompiled,
		Kernels: map[string][]string{
			"kernels-avx2":   kernelsavx2.Levels(),
			"kernels-avx512": kernelsavx512.Levels(),
		},
	}
}

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	v := versionInfo()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	dirty := ""
	if v.Dirty {
		dirty = " (modified work tree)"
	}
	simd := "none (pure-Go kernels only)"
	if len(v.SIMD) > 0 {
		simd = strings.Join(v.SIMD, ", ")
	}
	fmt.Fprintf(stdout, "k3 %s\ncommit:  %s%s\n", v.Version, orUnknown(v.Revision), dirty)
	if v.Time != "" {
		fmt.Fprintf(stdout, "date:    %s\n", v.Time)
	}
	fmt.Fprintf(stdout, "go:      %s %s/%s\nsimd:    %s\n", v.Go, v.OS, v.Arch, simd)
	names := make([]string, 0, len(v.Kernels))
	for n := range v.Kernels {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(stdout, "kernels: %s levels on this CPU: %s\n", n, strings.Join(v.Kernels[n], " "))
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown (built without VCS information)"
	}
	return s
}
