package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/plugintest"
	stagingmmap "github.com/k3-inference/k3/plugins/staging-mmap"
	stagingpread "github.com/k3-inference/k3/plugins/staging-pread"
)

// TestMain lets the test binary stand in for the k3 binary when a test
// re-executes it (os.Executable() is the test binary): with K3_TEST_AS_K3
// set it runs k3's main on its arguments.
func TestMain(m *testing.M) {
	if os.Getenv("K3_TEST_AS_K3") == "1" {
		os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// launch starts a built-in plugin the way k3 does: by re-executing itself
// as `k3 plugin NAME`.
func launch(name string, inProcess bool) plugin.Launch {
	return plugin.Launch{Name: name, InProcess: inProcess, Env: []string{"K3_TEST_AS_K3=1"}, Logger: slog.New(slog.DiscardHandler)}
}

// TestBuiltinStagers runs both built-in stagers in-process and as
// re-executed `k3 plugin` processes, from a budget where everything fits
// down to one where one layer's experts barely fit, and checks that every
// combination acquires the same bytes as a direct read of the files.
func TestBuiltinStagers(t *testing.T) {
	m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
	tr := plugintest.ZipfTrace(8, 4, m.Layers, m.Experts, m.TopK, 1.0)
	want := plugintest.Reference(t, m, tr)
	footprint := map[string]func(*plugin.OpenRequest, int) (int64, error){
		"staging-pread": stagingpread.Footprint,
		"staging-mmap":  stagingmmap.Footprint,
	}
	ctx := context.Background()
	for _, name := range []string{"staging-pread", "staging-mmap"} {
		for _, inProcess := range []bool{true, false} {
			for _, units := range []int{m.Layers * m.Experts, m.TopK} {
				t.Run(fmt.Sprintf("%s/inprocess=%v/units=%d", name, inProcess, units), func(t *testing.T) {
					budget, err := footprint[name](&m.Req, units)
					if err != nil {
						t.Fatal(err)
					}
					sup, err := plugin.SuperviseStager(ctx, launch(name, inProcess))
					if err != nil {
						t.Fatal(err)
					}
					defer sup.Close(ctx)
					if !inProcess && sup.Process().Pid() == 0 {
						t.Fatal("no plugin process")
					}
					r, resp, err := plugintest.NewRunner(ctx, sup, m, m.Request(budget, "", nil))
					if err != nil {
						t.Fatal(err)
					}
					defer r.Close()
					if err := r.Run(ctx, tr); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(r.Digest(), want) {
						t.Errorf("bytes differ from the files (mode %s)", resp.Mode)
					}
				})
			}
		}
	}
}

func TestPluginCommand(t *testing.T) {
	var stderr bytes.Buffer
	if code := runMain([]string{"plugin"}, &stderr, &stderr); code != 2 || !strings.Contains(stderr.String(), "staging-pread, staging-mmap") && !strings.Contains(stderr.String(), "staging-mmap, staging-pread") {
		t.Errorf("k3 plugin without a name: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	if code := runMain([]string{"plugin", "no-such"}, &stderr, &stderr); code != 1 || !strings.Contains(stderr.String(), `no built-in plugin "no-such"`) {
		t.Errorf("k3 plugin no-such: exit %d, %q", code, stderr.String())
	}
}

// BenchmarkStagerAcquire is the IPC cost of one decode step's Acquire and
// Release (16 experts × 3 routed tensors, all cached) for each built-in
// stager, in-process and as a `k3 plugin` subprocess.
func BenchmarkStagerAcquire(b *testing.B) {
	ctx := context.Background()
	spec := plugintest.Spec{Shards: 1, Layers: 1, Experts: 64, TopK: 16, ExpertSizes: []int64{4096, 4096, 4096}, Seed: 1}
	m := plugintest.Build(b, b.TempDir(), spec)
	var slices []plugin.Slice
	for _, id := range m.Routed(0) {
		for e := 0; e < 16; e++ {
			slices = append(slices, plugin.Slice{Tensor: id, Expert: e * 4})
		}
	}
	for _, name := range []string{"staging-pread", "staging-mmap"} {
		for _, inProcess := range []bool{true, false} {
			b.Run(fmt.Sprintf("%s/inprocess=%v", name, inProcess), func(b *testing.B) {
				st, proc, err := plugin.StartStager(ctx, launch(name, inProcess))
				if err != nil {
					b.Fatal(err)
				}
				defer proc.Kill()
				if _, err := st.Open(ctx, m.Request(64<<20, b.TempDir(), nil)); err != nil {
					b.Fatal(err)
				}
				defer st.Close(ctx)
				req := &plugin.AcquireRequest{Slices: slices}
				for b.Loop() {
					req.Step++
					if _, err := st.Acquire(ctx, req); err != nil {
						b.Fatal(err)
					}
					if err := st.Release(ctx, &plugin.ReleaseRequest{Step: req.Step}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDecodeTokenIPC is the stager traffic of one Kimi K3 decode
// token with everything cached: for each of 92 MoE layers a current hint, a
// speculative hint for the next layer, an Acquire of 16 experts × 3 routed
// tensors and a Release. The difference between the two modes is the
// plugin boundary's cost per token.
func BenchmarkDecodeTokenIPC(b *testing.B) {
	ctx := context.Background()
	const layers, experts, topK = 92, 64, 16
	spec := plugintest.Spec{Shards: 2, Layers: layers, Experts: experts, TopK: topK, ExpertSizes: []int64{512, 512, 512}, Seed: 1}
	m := plugintest.Build(b, b.TempDir(), spec)
	tr := plugintest.ZipfTrace(1, 1, layers, experts, topK, 1.0)
	for _, inProcess := range []bool{true, false} {
		b.Run(fmt.Sprintf("staging-pread/inprocess=%v", inProcess), func(b *testing.B) {
			st, proc, err := plugin.StartStager(ctx, launch("staging-pread", inProcess))
			if err != nil {
				b.Fatal(err)
			}
			defer proc.Kill()
			if _, err := st.Open(ctx, m.Request(1<<30, b.TempDir(), nil)); err != nil {
				b.Fatal(err)
			}
			defer st.Close(ctx)
			var step uint64
			token := func() {
				for l := 0; l < layers; l++ {
					st.Hint(ctx, &plugin.HintRequest{Layer: l, Experts: tr[0][l]})
					if l+1 < layers {
						st.Hint(ctx, &plugin.HintRequest{Layer: l + 1, Experts: tr[0][l+1], Speculative: true})
					}
					req := &plugin.AcquireRequest{Step: step}
					for _, id := range m.Routed(l) {
						for _, e := range tr[0][l] {
							req.Slices = append(req.Slices, plugin.Slice{Tensor: id, Expert: e})
						}
					}
					step++
					if _, err := st.Acquire(ctx, req); err != nil {
						b.Fatal(err)
					}
					if err := st.Release(ctx, &plugin.ReleaseRequest{Step: req.Step}); err != nil {
						b.Fatal(err)
					}
				}
			}
			token() // fill the cache: the benchmark is the boundary, not the disk
			for b.Loop() {
				token()
			}
		})
	}
}
