package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var testMachine = &Machine{MemTotal: 64 << 30, PhysicalCores: 8, AVX2: true, Storage: "nvme"}

func TestShippedProfilesLoad(t *testing.T) {
	for _, name := range []string{"nvme-64g.yaml", "sata-128g.yaml", "nvme-multi.yaml"} {
		t.Run(name, func(t *testing.T) {
			p, err := Load(Options{Profile: filepath.Join("..", "..", "configs", name), Environ: []string{}})
			if err != nil {
				t.Fatal(err)
			}
			if p.Memory.Budget <= 0 || p.Stager.Name != "pread" {
				t.Fatalf("unexpected profile: %+v", p)
			}
		})
	}
	// The shard path, from the file or as a comma-separated variable.
	q, err := Load(Options{Profile: "../../configs/nvme-multi.yaml", Environ: []string{}})
	if err != nil || len(q.ShardPath) != 2 || q.Stager.Options["devices"] != "auto" {
		t.Errorf("nvme-multi: shard path %v, stager options %v (%v)", q.ShardPath, q.Stager.Options, err)
	}
	q, err = Load(Options{Profile: "../../configs/nvme-64g.yaml", Environ: []string{"K3_SHARD_PATH=/a, /b"}})
	if err != nil || fmt.Sprint(q.ShardPath) != "[/a /b]" {
		t.Errorf("K3_SHARD_PATH: shard path %q (%v)", q.ShardPath, err)
	}
	p, _ := Load(Options{Profile: "../../configs/nvme-64g.yaml", Environ: []string{}})
	if p.Memory.Budget != 55<<30 {
		t.Errorf("nvme-64g budget = %v, want 55GiB", p.Memory.Budget)
	}
}

// TestThreadsZeroIsPhysicalCores: threads 0 (the shipped profiles') comes
// out of Load as the machine's physical cores; a number stays as it is.
func TestThreadsZeroIsPhysicalCores(t *testing.T) {
	p, err := Load(Options{Profile: "../../configs/nvme-64g.yaml", Machine: testMachine, Environ: []string{}})
	if err != nil || p.Threads != testMachine.PhysicalCores {
		t.Errorf("threads 0 loaded as %d (%v), want the %d physical cores", p.Threads, err, testMachine.PhysicalCores)
	}
	p, err = Load(Options{Profile: "../../configs/nvme-64g.yaml", Machine: testMachine, Environ: []string{"K3_THREADS=3"}})
	if err != nil || p.Threads != 3 {
		t.Errorf("K3_THREADS=3 loaded as %d (%v)", p.Threads, err)
	}
}

func TestUnknownKeyNamesIt(t *testing.T) {
	cases := map[string]string{
		"top level": "thredas: 4\n",
		"nested":    "stager:\n  io_workrs: 4\n",
		"section":   "stagger:\n  name: pread\n",
	}
	want := map[string]string{"top level": "thredas", "nested": "stager.io_workrs", "section": "stagger.name"}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Load(Options{Profile: writeFile(t, "p.yaml", body), Environ: []string{}})
			if err == nil || !strings.Contains(err.Error(), want[name]) {
				t.Fatalf("err = %v, want it to name %q", err, want[name])
			}
		})
	}
}

func TestLayering(t *testing.T) {
	prof := writeFile(t, "p.yaml", "name: mine\nthreads: 3\ncontext: 1000\nmemory:\n  budget: 10G\nstager:\n  io_workers: 2\n")
	p, err := Load(Options{
		Profile: prof,
		Environ: []string{"K3_CONTEXT=2000", "K3_STAGER__IO_WORKERS=6", "K3_PARITY=/x", "HOME=/root"},
		Flags:   map[string]any{"context": 3000},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "mine" || p.Threads != 3 {
		t.Errorf("file layer lost: %+v", p)
	}
	if p.Context != 3000 {
		t.Errorf("flag should win over env and file: context = %d", p.Context)
	}
	if p.Stager.IOWorkers != 6 {
		t.Errorf("env should win over file: io_workers = %d", p.Stager.IOWorkers)
	}
	if p.Memory.Budget != 10<<30 {
		t.Errorf("budget = %v", p.Memory.Budget)
	}
	if p.Stager.CachePolicy != "lfru" {
		t.Errorf("default lost: %+v", p.Stager)
	}
}

func TestValidationNamesField(t *testing.T) {
	cases := []struct{ body, want string }{
		{"stager:\n  name: floppy\n", "stager.name"},
		{"kernels:\n  name: avx1024\n", "kernels.name"},
		{"kernels:\n  float: sloppy\n", "kernels.float"},
		{"stager:\n  direct_io: maybe\n", "stager.direct_io"},
		{"threads: -1\n", "threads"},
		{"server:\n  parallel: 0\n", "server.parallel"},
		{"server:\n  parallel: 1000\n", "server.parallel"},
		{"server:\n  prefix_cache_mem: 3X\n", "unknown unit"},
		{"server:\n  temperature: -1\n", "server.temperature"},
		{"server:\n  n_predict: 0\n", "server.n_predict"},
		{"memory:\n  budget: 12Q\n", "unknown unit"},
		{"server:\n  port: 70000\n", "server.port"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			_, err := Load(Options{Profile: writeFile(t, "p.yaml", c.body), Environ: []string{}})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want mention of %q", err, c.want)
			}
		})
	}
}

func TestMissingProfileFile(t *testing.T) {
	_, err := Load(Options{Profile: "/nonexistent/p.yaml", Environ: []string{}})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/p.yaml") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseSize(t *testing.T) {
	cases := map[string]Size{"55G": 55 << 30, "55 GiB": 55 << 30, "512MiB": 512 << 20, "1.5T": 3 << 39, "1048576": 1 << 20, "4k": 4096}
	for in, want := range cases {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "G", "-1G", "1X", "NaN", "1e30T"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) should fail", bad)
		}
	}
}

func TestAutoUsesCgroupLimit(t *testing.T) {
	m := *testMachine
	m.CgroupLimit = 8 << 30
	p, err := Load(Options{Profile: "auto", Machine: &m, Environ: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Memory.Budget <= 0 || p.Memory.Budget >= 8<<30 {
		t.Fatalf("budget %v not under the 8GiB cgroup limit", p.Memory.Budget)
	}
	if p.Kernels.Name != "avx2" || p.Threads != 8 || p.Stager.IOWorkers != 8 {
		t.Fatalf("auto profile = %+v", p)
	}
	m.CgroupLimit = 0
	p, _ = Load(Options{Machine: &m, Environ: []string{}})
	if p.Memory.Budget != 56<<30 {
		t.Fatalf("64GiB machine budget = %v, want 56GiB", p.Memory.Budget)
	}
}

func TestCgroupFiles(t *testing.T) {
	root := t.TempDir()
	proc := writeFile(t, "cgroup", "0::/user.slice/job\n")
	dir := filepath.Join(root, "user.slice", "job")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "memory.max"), []byte("max\n"), 0o644)
	os.WriteFile(filepath.Join(root, "user.slice", "memory.max"), []byte("4294967296\n"), 0o644)
	if got, _ := cgroupMemory(proc, root); got != 4<<30 {
		t.Fatalf("v2 ancestor limit = %d", got)
	}
	v1 := writeFile(t, "cgroup1", "5:memory:/job\n3:cpu:/job\n")
	os.MkdirAll(filepath.Join(root, "memory", "job"), 0o755)
	os.WriteFile(filepath.Join(root, "memory", "job", "memory.limit_in_bytes"), []byte("1073741824\n"), 0o644)
	if got, _ := cgroupMemory(v1, root); got != 1<<30 {
		t.Fatalf("v1 limit = %d", got)
	}
}

func TestModeLine(t *testing.T) {
	p := Defaults()
	p.Memory.Budget = 55 << 30
	got := p.ModeLine(8)
	for _, want := range []string{"profile=default", "stager=pread(process)", "kernels=auto(process)", "budget=55.0GiB", "direct-io=auto", "lookahead=1", "threads=8"} {
		if !strings.Contains(got, want) {
			t.Errorf("mode line %q lacks %q", got, want)
		}
	}
	p.Kernels.Float = "fast"
	if got := p.ModeLine(8); !strings.Contains(got, "kernels=auto(process,float=fast)") {
		t.Errorf("float fast: mode line %q", got)
	}
}

// TestAllowedHosts: server.allowed_hosts is a list in a profile and a
// comma-separated string from the environment or a flag.
func TestAllowedHosts(t *testing.T) {
	prof := writeFile(t, "p.yaml", "server:\n  allowed_hosts: [a.example, b.example]\n")
	for _, c := range []struct {
		name    string
		environ []string
		flags   map[string]any
		want    []string
	}{
		{"profile", nil, nil, []string{"a.example", "b.example"}},
		{"env", []string{"K3_SERVER__ALLOWED_HOSTS=c.example, d.example"}, nil, []string{"c.example", "d.example"}},
		{"flag", []string{"K3_SERVER__ALLOWED_HOSTS=c.example"}, map[string]any{"server.allowed_hosts": "e.example,*"}, []string{"e.example", "*"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			environ := c.environ
			if environ == nil {
				environ = []string{}
			}
			p, err := Load(Options{Profile: prof, Environ: environ, Flags: c.flags})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, p.Server.AllowedHosts); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestShutdownGrace: server.shutdown_grace is a Go duration in every layer;
// a bare number (10 nanoseconds?) and a negative one are refused.
func TestShutdownGrace(t *testing.T) {
	cases := []struct {
		name, body string
		env        []string
		flags      map[string]any
		want       time.Duration
		err        string
	}{
		{name: "default", want: 10 * time.Second},
		{name: "file", body: "server:\n  shutdown_grace: 1m30s\n", want: 90 * time.Second},
		{name: "zero", body: "server:\n  shutdown_grace: 0\n", want: 0},
		{name: "env", env: []string{"K3_SERVER__SHUTDOWN_GRACE=3s"}, want: 3 * time.Second},
		{name: "flag", flags: map[string]any{"server.shutdown_grace": "250ms"}, want: 250 * time.Millisecond},
		{name: "bare number", body: "server:\n  shutdown_grace: 10\n", err: "shutdown_grace"},
		{name: "no unit flag", flags: map[string]any{"server.shutdown_grace": "ten"}, err: "not a duration"},
		{name: "negative", body: "server:\n  shutdown_grace: -1s\n", err: "server.shutdown_grace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := Options{Profile: "auto", Environ: c.env, Flags: c.flags, Machine: testMachine}
			if o.Environ == nil {
				o.Environ = []string{}
			}
			if c.body != "" {
				o.Profile = writeFile(t, "p.yaml", c.body)
			}
			p, err := Load(o)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want mention of %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Server.ShutdownGrace != c.want {
				t.Errorf("shutdown_grace = %v, want %v", p.Server.ShutdownGrace, c.want)
			}
		})
	}
}

// TestStagerOptions: the stager settings a profile file, variable or flag
// set are offered as set (the stager must declare them), the rest as
// implied; stager.options passes free keys through as set.
func TestStagerOptions(t *testing.T) {
	prof := writeFile(t, "p.yaml", "stager:\n  name: example\n  path: ./example-stager\n  io_workers: 8\n  options:\n    warm: false\n    depth: 3\n")
	p, err := Load(Options{Profile: prof, Environ: []string{"K3_STAGER__CACHE_POLICY=lru"}, Machine: &Machine{}})
	if err != nil {
		t.Fatal(err)
	}
	set, implied := p.StagerOptions()
	if d := cmp.Diff(map[string]string{"io_workers": "8", "cache_policy": "lru", "warm": "false", "depth": "3"}, set); d != "" {
		t.Errorf("set (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]string{"direct_io": "auto", "mlock": "false"}, implied); d != "" {
		t.Errorf("implied (-want +got):\n%s", d)
	}
	d := Defaults()
	if set, _ := d.StagerOptions(); len(set) != 0 {
		t.Errorf("defaults set %v", set)
	}
	if _, err := Load(Options{Profile: writeFile(t, "q.yaml", "stager:\n  optoins:\n    warm: false\n"), Machine: &Machine{}}); err == nil || !strings.Contains(err.Error(), "stager.optoins.warm") {
		t.Errorf("misspelt map key: %v", err)
	}
}

// TestUBatchClampedToBatch: as llama.cpp (n_ubatch = min(n_batch,
// n_ubatch)), a batch below the default ubatch lowers the ubatch instead
// of refusing to start ("k3 serve -b 32").
func TestUBatchClampedToBatch(t *testing.T) {
	for _, c := range []struct {
		name          string
		flags         map[string]any
		batch, ubatch int
	}{
		{"batch only", map[string]any{"batch": 32}, 32, 32},
		{"both, ubatch larger", map[string]any{"batch": 16, "ubatch": 64}, 16, 16},
		{"ubatch smaller", map[string]any{"batch": 64, "ubatch": 8}, 64, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Load(Options{Profile: "auto", Environ: []string{}, Flags: c.flags, Machine: testMachine})
			if err != nil {
				t.Fatal(err)
			}
			if p.Batch != c.batch || p.UBatch != c.ubatch {
				t.Fatalf("batch, ubatch = %d, %d; want %d, %d", p.Batch, p.UBatch, c.batch, c.ubatch)
			}
		})
	}
}

// TestRequestDefaults: --temp, --seed, -n and --cors-origins reach the
// profile from flags (strings, as the flag parser gives them) and the
// environment.
func TestRequestDefaults(t *testing.T) {
	p, err := Load(Options{Profile: "auto", Environ: []string{"K3_SERVER__CORS_ORIGINS=https://a.example, https://b.example"},
		Flags: map[string]any{"server.temperature": "0.25", "server.seed": 42, "server.n_predict": 7}, Machine: testMachine})
	if err != nil {
		t.Fatal(err)
	}
	s := p.Server
	if s.Temperature != 0.25 || s.Seed != 42 || s.NPredict != 7 || s.Parallel != 1 {
		t.Fatalf("temperature, seed, n_predict, parallel = %g, %d, %d, %d", s.Temperature, s.Seed, s.NPredict, s.Parallel)
	}
	if d := cmp.Diff([]string{"https://a.example", "https://b.example"}, s.CORSOrigins); d != "" {
		t.Errorf("cors_origins (-want +got):\n%s", d)
	}
	d := Defaults()
	if d.Server.Temperature != 0.8 || d.Server.Seed != -1 || d.Server.NPredict != -1 || d.Server.CORSOrigins != nil {
		t.Errorf("defaults: %+v", d.Server)
	}
}

// TestReasoning: --reasoning on|off sets enable_thinking for requests that
// do not, auto leaves the template's default, anything else is refused.
func TestReasoning(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
	}{{"", "nil"}, {"auto", "nil"}, {"on", "true"}, {"off", "false"}} {
		p := Defaults()
		p.Server.Reasoning = c.in
		if err := p.Validate(); err != nil {
			t.Fatalf("%q: %v", c.in, err)
		}
		got := "nil"
		if v := p.Server.EnableThinking(); v != nil {
			got = strconv.FormatBool(*v)
		}
		if got != c.want {
			t.Errorf("%q: enable_thinking %s, want %s", c.in, got, c.want)
		}
	}
	p := Defaults()
	p.Server.Reasoning = "maybe"
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "reasoning") {
		t.Errorf("maybe: %v", err)
	}
}

// TestAliases: --alias a,b as llama-server's std::set: trimmed, unique,
// sorted; the first is the model's id.
func TestAliases(t *testing.T) {
	s := Server{Alias: " tinyllama-2,fim, code,fim,"}
	if got := s.Aliases(); strings.Join(got, "|") != "code|fim|tinyllama-2" {
		t.Errorf("%q", got)
	}
	if got := (Server{}).Aliases(); got != nil {
		t.Errorf("%q", got)
	}
}
