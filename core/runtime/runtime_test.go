package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k3-inference/k3/core/buildinfo"
	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/kimik3"
	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/host"
	"github.com/k3-inference/k3/core/plugin/plugintest"
	"github.com/k3-inference/k3/core/synth"
)

// The test plugins: a stager that serves every slice from the shard files
// and leaves a file in the shared-memory directory the host gave it, and
// kernels that advertise no type (every product falls back to the core's
// reference) but hold an arena like any kernels plugin.
func init() {
	host.RegisterStager("staging-rttest", func() plugin.Stager { return &shardStager{} })
	host.RegisterKernels("kernels-rttest", func() plugin.Kernels { return noKernels{} })
}

// TestMain serves a test plugin when the host re-executes this binary as
// `plugin NAME` (a built-in stager, as k3 does with itself) or starts it as
// an external kernels binary (testKernelsEnv).
func TestMain(m *testing.M) {
	name := os.Getenv("K3_RTTEST_PLUGIN")
	if len(os.Args) == 3 && os.Args[1] == "plugin" {
		name = os.Args[2]
	}
	if name != "" {
		if err := host.ServeBuiltin(name); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testKernelsEnv makes this binary, started as the kernels' path, serve
// the test kernels.
var testKernelsEnv = []string{"K3_RTTEST_PLUGIN=kernels-rttest"}

// shardStager is plugintest.FileStager that also leaves a file in the
// shared-memory directory the host gave it, as a real stager's slots.
type shardStager struct{ plugintest.FileStager }

func (s *shardStager) Open(ctx context.Context, req *plugin.OpenRequest) (*plugin.OpenResponse, error) {
	if req.ShmDir != "" {
		if err := os.WriteFile(filepath.Join(req.ShmDir, "slots"), []byte("x"), 0o600); err != nil {
			return nil, err
		}
	}
	return s.FileStager.Open(ctx, req)
}

type noKernels struct{}

func (noKernels) Describe(context.Context) (*plugin.KernelsInfo, error) {
	return &plugin.KernelsInfo{Name: "rttest"}, nil
}

func (noKernels) Execute(context.Context, *plugin.ExecuteRequest) (*plugin.ExecuteResponse, error) {
	return &plugin.ExecuteResponse{}, nil
}

func tinyModel(t *testing.T) string {
	t.Helper()
	cfg, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Type = synth.TypeQ2_K
	res, err := synth.Write(filepath.Join(t.TempDir(), "tiny.gguf"), cfg, synth.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Paths[0]
}

// testProfile runs the test stager and kernels in mode at a budget.
func testProfile(mode string, budget config.Size) *config.Profile {
	p := config.Defaults()
	p.Name = "rt"
	p.Memory.Budget = budget
	p.Stager.Name, p.Stager.Mode = "rttest", mode
	exe, _ := os.Executable()
	p.Kernels = config.Kernels{Name: "kernels-rttest", Path: exe, Mode: mode}
	return &p
}

// shmFiles are the k3 shared-memory files of the given processes.
func shmFiles(t *testing.T, pids ...int) []string {
	t.Helper()
	var out []string
	for _, pid := range pids {
		m, err := filepath.Glob(filepath.Join(host.ShmDir(), fmt.Sprintf("k3-*-%d-*", pid)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

// TestOpenStaged opens the tiny model through the test stager and kernels,
// in this process and as subprocesses: the mode line says what runs, the
// budget report divides the profile's budget with the sequence state the
// architecture's StateSize gives at the context asked for, the model runs
// as it does on the plain mapping, and Close removes the plugins'
// shared-memory files.
func TestOpenStaged(t *testing.T) {
	path := tinyModel(t)
	ctx := context.Background()
	o := Options{Context: 300, Threads: 2, KernelsEnv: testKernelsEnv, Logger: slog.New(slog.DiscardHandler),
		Machine: func(string) config.Machine { return config.Machine{MemTotal: 1 << 40, MemAvailable: 1 << 40} }}
	plain, err := Open(ctx, path, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	want := forward(t, plain.Model)
	if plain.Staged != nil || plain.Mode.Stager != "none" || plain.Mode.Profile != "none" || plain.Mode.Split != nil ||
		plain.Mode.Kernels != "reference" || plain.Budget != (engine.Budget{}) {
		t.Errorf("plain mapping: %+v", plain.Mode)
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}

	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fixed, perToken, err := kimik3.StateSize(f, f)
	if err != nil {
		t.Fatal(err)
	}
	state := 2*fixed + 512*perToken // the live sequence at 512 rows and one snapshot's fixed part
	for _, mode := range []string{"inprocess", "process"} {
		t.Run(mode, func(t *testing.T) {
			rt, err := Open(ctx, path, testProfile(mode, 64<<20), o)
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			pids := []int{os.Getpid()}
			if p := rt.Staged.Supervisor().Process(); p != nil {
				pids = append(pids, p.Pid())
			}
			b := rt.Budget
			if b.Total != 64<<20 || b.State != state || b.Context != 300 || b.Stager != b.Total-engine.Headroom(b.Total)-state-b.Activations || b.Check() != nil {
				t.Errorf("budget %+v, want a total of 64 MiB with %d bytes of state", b, state)
			}
			line := rt.Mode.String()
			for _, w := range []string{"k3: profile=rt ", " stager=rttest(" + mode + ") ", " budget=64.0MiB ", " threads=2 ",
				" state-reserve=" + config.Size(state).String() + " ", ` stager-mode="shards"`,
				" version=" + buildinfo.Get().Version + " revision=" + buildinfo.Get().ShortRevision() + " kernels=rttest " + mode} {
				if !strings.Contains(line, w) {
					t.Errorf("mode line lacks %q: %s", w, line)
				}
			}
			// Plugin kernels over a stager resolve weights through the
			// process's mappings, which a restarted stager replaces: they
			// must follow its remaps (the runtime's copy in bench once did
			// not).
			if pk, ok := rt.Kernels.(*engine.PluginKernels); !ok {
				t.Errorf("kernels %T, want the plugin's", rt.Kernels)
			} else if !pk.Follows(rt.Staged) {
				t.Error("the plugin kernels do not follow the stager's remaps (PluginKernels.Follow)")
			}
			if got := forward(t, rt.Model); !equal(got, want) {
				t.Error("logits through the stager differ from the plain mapping's")
			}
			if len(shmFiles(t, pids...)) == 0 {
				t.Fatal("no shared-memory files while running: the test proves nothing")
			}
			if err := rt.Close(); err != nil {
				t.Fatal(err)
			}
			if left := shmFiles(t, pids...); len(left) != 0 {
				t.Errorf("left after Close: %v", left)
			}
			if err := rt.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

func forward(t *testing.T, m model.Model) []float32 {
	t.Helper()
	logits := make([]float32, 4*m.Params().Vocab)
	if err := m.Forward(m.NewState(), []int32{5, 17, 300, 2}, true, logits); err != nil {
		t.Fatal(err)
	}
	return logits
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestOpenRefusals: a budget that cannot run one step is refused before
// anything starts, with the budget's numbers; a budget above what the
// machine gives is lowered with a warning first.
func TestOpenRefusals(t *testing.T) {
	path := tinyModel(t)
	var warned []string
	o := Options{Context: 300, Logger: slog.New(slog.DiscardHandler), Warn: func(m string) { warned = append(warned, m) },
		Machine: func(string) config.Machine { return config.Machine{MemTotal: 1 << 30, MemAvailable: 1 << 20} }}
	_, err := Open(context.Background(), path, testProfile("inprocess", 64<<20), o)
	var be *engine.BudgetError
	if !errors.As(err, &be) || be.Total >= 64<<20 {
		t.Errorf("64 MiB on a machine with 1 MiB free: %v", err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "more than this machine can give") {
		t.Errorf("warnings %q", warned)
	}
}

// TestArchWithoutExperts: an architecture whose registration names no
// routed experts runs on the plain mapping and is refused through a
// stager, by name.
func TestArchWithoutExperts(t *testing.T) {
	model.Register(model.Arch{Name: "rt-plain", New: func(model.Config, model.Weights, model.Options) (model.Model, error) {
		return nil, errors.New("not built in this test")
	}})
	path := filepath.Join(t.TempDir(), "plain.gguf")
	w, err := gguf.Create(path, []gguf.KV{{Key: "general.architecture", Value: gguf.Str("rt-plain")}}, nil, gguf.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Plan(f, testProfile("inprocess", 64<<20), Options{}); err == nil || !strings.Contains(err.Error(), `"rt-plain" cannot run through a stager`) {
		t.Errorf("Plan: %v", err)
	}
	_, err = OpenFile(context.Background(), f, nil, Options{})
	if err == nil || !strings.Contains(err.Error(), "not built in this test") {
		t.Errorf("plain mapping: %v, want the constructor's error", err)
	}
}

// TestShippedProfileClamped (issue 23): nvme-64g's 55 GiB on a 24 GiB box
// comes down to what the box has free, with a warning that says both.
func TestShippedProfileClamped(t *testing.T) {
	prof, err := config.Load(config.Options{Profile: filepath.Join("..", "..", "configs", "nvme-64g.yaml"), Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	machine := func(string) config.Machine {
		return config.Machine{MemTotal: 24 << 30, MemAvailable: 20 << 30, Self: 64 << 20}
	}
	var warning string
	got, err := fitBudget(prof, "model.gguf", machine, func(m string) { warning = m })
	if err != nil {
		t.Fatal(err)
	}
	if want := config.Size(20<<30 + 64<<20); got.Memory.Budget != want || prof.Memory.Budget != 55<<30 {
		t.Errorf("budget %v (profile's now %v), want %v (and the profile's 55GiB untouched)", got.Memory.Budget, prof.Memory.Budget, want)
	}
	for _, w := range []string{"55.0GiB", "20.1GiB", "MemTotal 24.0GiB"} {
		if !strings.Contains(warning, w) {
			t.Errorf("warning lacks %q: %s", w, warning)
		}
	}
}

// TestPlanSlots: the budget reserves the sequence state once per slot,
// plus the prefix cache's memory, and the stager gets what that leaves.
func TestPlanSlots(t *testing.T) {
	f, err := gguf.Open(tinyModel(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	prof := testProfile("inprocess", 256<<20)
	plan := func(o Options) engine.Budget {
		t.Helper()
		o.Context = 1000
		b, err := Plan(f, prof, o)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	one := plan(Options{})
	if one.State <= 0 {
		t.Fatalf("no state reserved: %+v", one)
	}
	three := plan(Options{Slots: 3})
	if three.State != 3*one.State || three.Stager != one.Stager-2*one.State {
		t.Errorf("3 slots reserve %d (stager %d), 1 slot %d (stager %d)", three.State, three.Stager, one.State, one.Stager)
	}
	cached := plan(Options{Slots: 3, PrefixCache: engine.CacheOptions{Mem: 8 << 20}})
	if cached.State != three.State+8<<20 {
		t.Errorf("with an 8 MiB prefix cache %d, without %d", cached.State, three.State)
	}
	p := *prof
	p.Server.Parallel = 2
	if b, err := Plan(f, &p, Options{Context: 1000}); err != nil || b.State != 2*one.State {
		t.Errorf("server.parallel 2 reserves %d, one slot %d (%v)", b.State, one.State, err)
	}
}
