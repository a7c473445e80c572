package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/plugin/plugintest"
	"github.com/k3-inference/k3/core/synth"
)

// buildOutOfTree builds plugins/dir as a third party builds a plugin: in
// its own module (its go.mod requires the SDK through a replace
// directive), with its own go.sum, into a binary outside the repository.
func buildOutOfTree(t *testing.T, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds plugin binaries")
	}
	bin := filepath.Join(t.TempDir(), dir)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("..", "..", "plugins", dir)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build in %s: %v\n%s", cmd.Dir, err, out)
	}
	return bin
}

// writeProfile writes a profile file and returns its path.
func writeProfile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "profile.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestThirdPartyPlugins runs the example stager and kernels plugins, built
// out of tree, through k3 eval and k3 run with a profile that names them:
// the logits are those of the plain path and of the built-in backends bit
// for bit, the mode line shows the stager's options, and a profile that
// sets an option a plugin does not declare is refused naming the plugin
// and the key.
func TestThirdPartyPlugins(t *testing.T) {
	stager, kernels := buildOutOfTree(t, "example-stager"), buildOutOfTree(t, "example-kernels")
	path, _ := stageModel(t)
	args := []string{"-m", path, "--tokens", "5,17,300,2,99,42,7", "--full", "-n", "6", "-t", "2", "-ub", "3"}
	plain := runEvalText(t, args...)
	eval := func(t *testing.T, profile string) (string, string, int) {
		var out, errb bytes.Buffer
		code := runMain(append(append([]string{"eval"}, args...), "--profile", writeProfile(t, profile)), &out, &errb)
		return out.String(), errb.String(), code
	}

	t.Run("built-in", func(t *testing.T) {
		out, errs, code := eval(t, "stager: {name: pread}\nkernels: {name: auto}\n")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		if out != plain {
			t.Error("built-in backends' output differs from the plain path's")
		}
		if !strings.Contains(errs, "stager-options=cache_policy=lfru,device_workers=,devices=auto,direct_io=auto,io_workers=4,lfru_half_life=8 ") {
			t.Errorf("no stager options in the mode line:\n%s", errs)
		}
	})
	t.Run("examples", func(t *testing.T) {
		out, errs, code := eval(t, fmt.Sprintf("stager: {name: example, path: %s, options: {warm: false}}\nkernels: {name: example, path: %s}\n", stager, kernels))
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		if out != plain {
			t.Error("example plugins' output differs from the plain path's")
		}
		for _, want := range []string{"stager=example@" + stager, "stager-options=warm=false ", "kernels=example (pure Go, F32) process"} {
			if !strings.Contains(errs, want) {
				t.Errorf("no %q in:\n%s", want, errs)
			}
		}
	})
	t.Run("examples f32", func(t *testing.T) {
		// Every product of an F32 model goes to the example kernels (with
		// Q2_K above, the activations' quantization hides small errors).
		f32 := kernelsModel(t, synth.TypeF32)
		a := []string{"-m", f32, "--tokens", "5,17,300,2,99,42,7", "--full", "-n", "4", "-t", "2"}
		var out, errb bytes.Buffer
		prof := writeProfile(t, fmt.Sprintf("stager: {name: example, path: %s}\nkernels: {name: example, path: %s}\n", stager, kernels))
		if code := runMain(append(append([]string{"eval"}, a...), "--profile", prof), &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		if out.String() != runEvalText(t, a...) {
			t.Error("example plugins' output on an F32 model differs from the plain path's")
		}
	})
	t.Run("run", func(t *testing.T) {
		// The reproduction: a profile naming the example stager
		// and nothing else; the profile's stager settings (io_workers,
		// cache_policy ...) apply to stagers that declare them.
		code, out, errs := runRunArgs(t, "", "-m", path, "--profile", writeProfile(t, "stager: {name: example, path: "+stager+"}\n"), "-p", "Hello", "-n", "4", "-t", "1", "--temp", "0")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		if strings.TrimSpace(out) == "" || !strings.Contains(errs, "stager-options=warm=true ") {
			t.Errorf("stdout %q, stderr:\n%s", out, errs)
		}
	})
	for _, c := range []struct{ name, profile, want string }{
		{"undeclared key", "stager: {name: example, path: STAGER, io_workers: 8}\n", "stager example: unknown option io_workers (it takes warm)"},
		{"undeclared free key", "stager: {name: example, path: STAGER, options: {depth: 3}}\n", "stager example: unknown option depth (it takes warm)"},
		{"type", "stager: {name: example, path: STAGER, options: {warm: maybe}}\n", `stager example: option warm="maybe": not a bool`},
		{"built-in", "stager: {name: mmap, direct_io: \"off\"}\n", "stager staging-mmap: unknown option direct_io (it takes cache_policy, lfru_half_life, mlock, evict, io_workers)"},
		{"kernels", "kernels: {name: example, path: KERNELS, float: fast}\n", "kernels example: unknown option float (it takes no options)"},
	} {
		t.Run("refused/"+c.name, func(t *testing.T) {
			_, errs, code := eval(t, strings.NewReplacer("STAGER", stager, "KERNELS", kernels).Replace(c.profile))
			if code == 0 || !strings.Contains(errs, c.want) {
				t.Errorf("exit %d, want an error with %q:\n%s", code, c.want, errs)
			}
		})
	}
}

// TestThirdPartyConformance runs the plugintest suite on the out-of-tree
// examples: the stager at every budget and across kill -9 (its bytes are
// the files', its stats hold), the kernels across kill -9 mid-generation
// (the logits and tokens of an undisturbed run, which are the
// reference's).
func TestThirdPartyConformance(t *testing.T) {
	stager, kernels := buildOutOfTree(t, "example-stager"), buildOutOfTree(t, "example-kernels")
	l := host.Launch{Name: "example", Path: stager}
	t.Run("stager", func(t *testing.T) {
		m := plugintest.Build(t, t.TempDir(), plugintest.SmallSpec)
		tr := plugintest.ZipfTrace(1, 6, m.Layers, m.Experts, m.TopK, 1.0)
		want := plugintest.Reference(t, m, tr)
		got := plugintest.CheckBudgetsProcess(t, l, m, tr, []plugintest.Budget{{Name: "all", Bytes: 1 << 30}, {Name: "small", Bytes: 1 << 20}}, map[string]string{"warm": "true"})
		plugintest.MustEqual(t, "budgets", want, got)
		plugintest.MustEqual(t, "kill -9", want, plugintest.CheckKillRestart(t, l, m, tr, 1<<30, nil))
	})
	t.Run("kernels", func(t *testing.T) {
		const n = 8
		path := kernelsModel(t, synth.TypeQ2_K)
		want := runKernels(t, path, openKernelsBackend(t, config.Kernels{Name: "reference"}), n, nil)
		b := openKernelsBackend(t, config.Kernels{Name: "example", Path: kernels, Mode: "process"})
		pk := b.(*engine.PluginKernels)
		got := runKernels(t, path, b, n, func(i int) {
			if i == 3 {
				syscall.Kill(pk.Supervisor().Process().Pid(), syscall.SIGKILL)
				for start := time.Now(); !pk.Supervisor().Process().Exited() && time.Since(start) < 5*time.Second; {
					time.Sleep(time.Millisecond)
				}
			}
		})
		if diff := cmp.Diff(want.greedy, got.greedy); diff != "" {
			t.Errorf("greedy differs from the reference's (-want +got):\n%s", diff)
		}
		if !bitsEqual(want.logits, got.logits) {
			t.Error("prompt logits differ from the reference's")
		}
		s := pk.Stats()
		if s.Ops == 0 || s.Fallbacks == 0 || pk.Supervisor().Restarts() == 0 {
			t.Errorf("%d products on the plugin, %d on the reference, %d restarts: want all three", s.Ops, s.Fallbacks, pk.Supervisor().Restarts())
		}
	})
}
