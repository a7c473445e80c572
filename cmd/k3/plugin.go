package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	kernelsavx2 "github.com/k3-inference/k3/plugins/kernels-avx2"
	kernelsavx512 "github.com/k3-inference/k3/plugins/kernels-avx512"
	stagingmmap "github.com/k3-inference/k3/plugins/staging-mmap"
	stagingpread "github.com/k3-inference/k3/plugins/staging-pread"
)

// stagerFootprints are the built-in stagers' own sizing, by profile
// stager name (runtime.Options.Footprints): the budget check and the
// grouping of a step's experts use the arithmetic the stager will.
var stagerFootprints = map[string]engine.Footprint{"pread": stagingpread.Footprint, "mmap": stagingmmap.Footprint}

// The built-in plugins travel inside the k3 binary; the host starts them by
// re-executing it as `k3 plugin NAME`, so a release is one file.
func init() {
	host.RegisterStager("staging-pread", func() plugin.Stager { return stagingpread.New() })
	host.RegisterStager("staging-mmap", func() plugin.Stager { return stagingmmap.New() })
	host.RegisterKernels("kernels-avx2", func() plugin.Kernels { return kernelsavx2.NewPlugin() })
	host.RegisterKernels("kernels-avx512", func() plugin.Kernels { return kernelsavx512.NewPlugin() })
	register(&command{
		name:    "plugin",
		summary: "serve a built-in plugin to a k3 host (started by k3 itself)",
		run:     runPlugin,
	})
}

func runPlugin(args []string, _, stderr io.Writer) error {
	fs := newFlags("plugin", stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: k3 plugin NAME\n\nServes a built-in plugin over go-plugin; k3 runs this itself.\nplugins: %s\n", strings.Join(host.Builtins(), ", "))
	}
	if err := parseFlags(fs, args, true); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	return host.ServeBuiltin(fs.Arg(0))
}
