package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFitBudget: a budget above what the machine or its memory cgroup can
// give comes back clamped, with a warning that says both numbers; one
// within stays, without a word.
func TestFitBudget(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		name   string
		budget Size
		m      Machine
		want   Size
		words  []string // in the warning; none: no warning
	}{
		{"fits", 16 * gib, Machine{MemTotal: 64 * gib, MemAvailable: 40 * gib}, 16 * gib, nil},
		{"none", 0, Machine{MemTotal: 24 * gib, MemAvailable: 20 * gib}, 0, nil},
		{"unknown machine", 55 * gib, Machine{}, 55 * gib, nil},
		{"24GiB box", 55 * gib, Machine{MemTotal: 24 * gib, MemAvailable: 20 * gib, Self: gib / 2},
			41 * gib / 2, []string{"55.0GiB", "59055800320 bytes", "20.5GiB", "MemAvailable 20.0GiB", "512.0MiB this process", "MemTotal 24.0GiB"}},
		{"old kernel", 55 * gib, Machine{MemTotal: 24 * gib}, 24 * gib, []string{"55.0GiB", "24.0GiB", "MemTotal"}},
		{"cgroup", 8 * gib, Machine{MemTotal: 64 * gib, MemAvailable: 60 * gib, CgroupLimit: gib, CgroupUsage: gib / 4, Self: gib / 8},
			gib - gib/8, []string{"8.0GiB", "896.0MiB", "cgroup limit 1.0GiB", "128.0MiB the rest"}},
		{"cgroup above RAM", 55 * gib, Machine{MemTotal: 24 * gib, MemAvailable: 20 * gib, CgroupLimit: 100 * gib},
			20 * gib, []string{"MemAvailable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, warn, err := FitBudget(tc.budget, tc.m)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("budget %v, want %v", got, tc.want)
			}
			if (warn == "") != (tc.words == nil) {
				t.Fatalf("warning %q", warn)
			}
			for _, w := range tc.words {
				if !strings.Contains(warn, w) {
					t.Errorf("warning %q lacks %q", warn, w)
				}
			}
		})
	}
}

// TestFitBudgetNothing: a cgroup whose other members hold its whole limit
// leaves nothing to clamp to; that is an error, not a budget of 0 (none).
func TestFitBudgetNothing(t *testing.T) {
	const gib = 1 << 30
	_, _, err := FitBudget(8*gib, Machine{MemTotal: 64 * gib, MemAvailable: 60 * gib, CgroupLimit: gib, CgroupUsage: 2 * gib})
	if err == nil || !strings.Contains(err.Error(), "8.0GiB") || !strings.Contains(err.Error(), "can give nothing") {
		t.Errorf("err = %v", err)
	}
}

// TestCgroupUsage: the usage is read where the tightest limit is, less
// the inactive page cache, for cgroup v2 and v1.
func TestCgroupUsage(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/memory.max", "2147483648\n")
	write("a/memory.current", "900\n")
	write("a/b/memory.max", "1073741824\n")
	write("a/b/memory.current", "1000\n")
	write("a/b/memory.stat", "anon 600\nfile 400\ninactive_file 300\nactive_file 100\n")
	v2 := writeFile(t, "cgroup", "0::/a/b\n")
	if limit, usage := cgroupMemory(v2, root); limit != 1<<30 || usage != 700 {
		t.Errorf("v2: limit %d usage %d, want %d and 700", limit, usage, 1<<30)
	}
	write("memory/job/memory.limit_in_bytes", "536870912\n")
	write("memory/job/memory.usage_in_bytes", "5000\n")
	write("memory/job/memory.stat", "cache 3000\ninactive_file 10\ntotal_inactive_file 2000\n")
	v1 := writeFile(t, "cgroup1", "5:memory:/job\n")
	if limit, usage := cgroupMemory(v1, root); limit != 512<<20 || usage != 3000 {
		t.Errorf("v1: limit %d usage %d, want %d and 3000", limit, usage, 512<<20)
	}
}

func TestMeminfo(t *testing.T) {
	p := writeFile(t, "meminfo", "MemTotal:       25165824 kB\nMemFree:         1000 kB\nMemAvailable:   20971520 kB\nHugePages_Total:       0\n")
	m := meminfo(p)
	if m["MemTotal"] != 24<<30 || m["MemAvailable"] != 20<<30 || m["HugePages_Total"] != 0 {
		t.Errorf("meminfo = %v", m)
	}
}
