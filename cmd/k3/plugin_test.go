package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/ggufreq"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/plugin/plugintest"
	"github.com/k3-inference/k3/core/synth"
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
	// Every plugin a test starts (run, serve, eval re-execute "k3") is this
	// binary acting as k3.
	os.Setenv("K3_TEST_AS_K3", "1")
	os.Exit(m.Run())
}

// launch starts a built-in plugin the way k3 does: by re-executing itself
// as `k3 plugin NAME`.
func launch(name string, inProcess bool) host.Launch {
	return host.Launch{Name: name, InProcess: inProcess, Env: []string{"K3_TEST_AS_K3=1"}, Logger: slog.New(slog.DiscardHandler)}
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
					sup, err := host.SuperviseStager(ctx, launch(name, inProcess))
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
				st, proc, err := host.StartStager(ctx, launch(name, inProcess))
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
			st, proc, err := host.StartStager(ctx, launch("staging-pread", inProcess))
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

// TestStagersOnSyntheticKimiK3 serves a synthetic kimi-k3 GGUF, split in
// shards, through both stagers (in-process and as `k3 plugin` processes) at
// the smallest budget a layer's routed experts fit in, and checks every
// expert slice and always-needed tensor against the GGUF reader's view.
func TestStagersOnSyntheticKimiK3(t *testing.T) {
	cfg, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Type = synth.TypeQ2_K
	res, err := synth.Write(filepath.Join(t.TempDir(), "k3.gguf"), cfg, synth.WriteOptions{Split: gguf.SplitOptions{MaxTensors: 40}})
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(res.Paths[0])
	if err != nil {
		t.Fatal(err)
	}
	base, err := ggufreq.OpenRequest(f)
	if err != nil {
		t.Fatal(err)
	}
	// The GGUF reader's bytes, hashed up front: its mapping must be gone
	// (and the files synced) before the stagers run, or staging-mmap could
	// not drop those pages and its budget check would count them.
	want := map[[2]int][32]byte{}
	for id, tn := range base.Tensors {
		ti, _ := f.Tensor(tn.Name)
		data, err := f.TensorData(ti)
		if err != nil {
			t.Fatal(err)
		}
		if !tn.Routed() {
			want[[2]int{id, 0}] = sha256.Sum256(data)
		}
		for e := 0; e < tn.Experts; e++ {
			want[[2]int{id, e}] = sha256.Sum256(data[int64(e)*tn.ExpertSize : int64(e+1)*tn.ExpertSize])
		}
	}
	f.Close()
	for _, p := range base.Shards {
		if err := syncFile(p); err != nil {
			t.Fatal(err)
		}
	}
	if len(base.Shards) < 2 {
		t.Fatalf("%d shards; the test wants a split model", len(base.Shards))
	}
	footprint := map[string]func(*plugin.OpenRequest, int) (int64, error){
		"staging-pread": stagingpread.Footprint,
		"staging-mmap":  stagingmmap.Footprint,
	}
	ctx := context.Background()
	for _, name := range []string{"staging-pread", "staging-mmap"} {
		for _, inProcess := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/inprocess=%v", name, inProcess), func(t *testing.T) {
				req := *base
				req.Budget, err = footprint[name](&req, cfg.NExpertUsed)
				if err != nil {
					t.Fatal(err)
				}
				sup, err := host.SuperviseStager(ctx, launch(name, inProcess))
				if err != nil {
					t.Fatal(err)
				}
				defer sup.Close(ctx)
				resp, err := sup.Open(ctx, &req)
				if err != nil {
					t.Fatal(err)
				}
				views, err := plugin.MapRegions(resp.Regions)
				if err != nil {
					t.Fatal(err)
				}
				defer views.Close()
				checked := 0
				step := uint64(0)
				for id, tn := range req.Tensors {
					experts := max(tn.Experts, 1)
					for e := 0; e < experts; e++ {
						step++
						got, err := sup.Acquire(ctx, &plugin.AcquireRequest{Step: step, Slices: []plugin.Slice{{Tensor: id, Expert: e}}})
						if err != nil {
							t.Fatal(err)
						}
						b, err := views.Bytes(got.Locations[0])
						if err != nil {
							t.Fatal(err)
						}
						if sha256.Sum256(b) != want[[2]int{id, e}] {
							t.Fatalf("%s expert %d: bytes differ from the GGUF reader's", tn.Name, e)
						}
						views.Forget(got.Locations)
						sup.Release(ctx, &plugin.ReleaseRequest{Step: step})
						checked++
					}
				}
				st, err := sup.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d slices of %d tensors in %d shards; %s", checked, len(req.Tensors), len(req.Shards), st.Mode)
				if st.ResidentBytes > req.Budget {
					t.Errorf("resident %d over the budget %d", st.ResidentBytes, req.Budget)
				}
			})
		}
	}
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
