package config

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Available is the most memory k3 can count on, and how it was found: on
// the machine, MemAvailable (MemTotal on kernels without it) and what k3
// holds already; in a limited cgroup, at most the limit less what the rest
// of the cgroup holds. how is empty when nothing is known.
func (m Machine) Available() (avail int64, how string) {
	switch {
	case m.MemAvailable > 0:
		avail = m.MemAvailable + m.Self
		how = fmt.Sprintf("MemAvailable %s + %s this process holds, of MemTotal %s", Size(m.MemAvailable), Size(m.Self), Size(m.MemTotal))
	case m.MemTotal > 0:
		avail, how = m.MemTotal, fmt.Sprintf("MemTotal %s", Size(m.MemTotal))
	}
	if m.CgroupLimit > 0 {
		others := max(m.CgroupUsage-m.Self, 0)
		if c := m.CgroupLimit - others; how == "" || c < avail {
			avail = max(c, 0)
			how = fmt.Sprintf("memory cgroup limit %s less %s the rest of the cgroup holds", Size(m.CgroupLimit), Size(others))
		}
	}
	return avail, how
}

// FitBudget returns budget, or what m can give (Available) when that is
// less, with a warning that says both. A zero budget (none) stays. When m
// can give nothing at all, there is nothing to clamp to: an error.
func FitBudget(budget Size, m Machine) (Size, string, error) {
	avail, how := m.Available()
	if budget <= 0 || how == "" || int64(budget) <= avail {
		return budget, "", nil
	}
	if avail <= 0 {
		return 0, "", fmt.Errorf("memory budget %s (%d bytes): this machine can give nothing (%s)", budget, int64(budget), how)
	}
	return Size(avail), fmt.Sprintf("memory budget %s (%d bytes) is more than this machine can give: %s (%d bytes: %s); using %s",
		budget, int64(budget), Size(avail), avail, how, Size(avail)), nil
}

// meminfo reads /proc/meminfo's fields in bytes.
func meminfo(path string) map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 {
			continue
		}
		n, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 2 && fields[2] == "kB" {
			n <<= 10
		}
		out[strings.TrimSuffix(fields[0], ":")] = n
	}
	return out
}

// cgroupMemory returns the tightest memory limit of this process's cgroup
// and its ancestors (v2 memory.max or v1 memory.limit_in_bytes; 0: none)
// and what the cgroup holding it uses now, less its inactive page cache.
func cgroupMemory(procFile, root string) (limit, usage int64) {
	data, err := os.ReadFile(procFile)
	if err != nil {
		return 0, 0
	}
	consider := func(dir, limitFile, usageFile, inactive string) {
		v := readLimit(filepath.Join(dir, limitFile))
		if v <= 0 || v >= 1<<60 || (limit != 0 && v >= limit) {
			return
		}
		limit = v
		usage = readLimit(filepath.Join(dir, usageFile))
		if usage > 0 {
			usage = max(usage-statField(filepath.Join(dir, "memory.stat"), inactive), 0)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "": // cgroup v2
			for dir := filepath.Join(root, parts[2]); strings.HasPrefix(dir, root); dir = filepath.Dir(dir) {
				consider(dir, "memory.max", "memory.current", "inactive_file")
				if dir == root {
					break
				}
			}
		case strings.Contains(","+parts[1]+",", ",memory,"): // cgroup v1
			base := filepath.Join(root, "memory")
			for dir := filepath.Join(base, parts[2]); strings.HasPrefix(dir, base); dir = filepath.Dir(dir) {
				consider(dir, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
				if dir == base {
					break
				}
			}
		}
	}
	return limit, usage
}

// statField reads one field of a cgroup's memory.stat, 0 if absent.
func statField(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// selfRSS is this process's resident memory in bytes (/proc/self/statm).
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
