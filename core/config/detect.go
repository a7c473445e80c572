package config

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/klauspost/cpuid/v2"
	"golang.org/x/sys/unix"
)

// Machine is what auto-profiling looks at.
type Machine struct {
	// MemTotal is physical RAM in bytes; MemAvailable what the kernel can
	// hand out without swapping (free memory and page cache it can drop);
	// both from /proc/meminfo, 0 when unknown.
	MemTotal, MemAvailable int64
	// CgroupLimit is the tightest memory limit of the cgroup k3 runs in
	// and its ancestors, page cache included; 0 when there is none.
	// CgroupUsage is what that cgroup holds now, less its inactive page
	// cache.
	CgroupLimit, CgroupUsage int64
	// Self is what this process holds already (resident bytes): counted
	// in the usage above, yet k3's to spend.
	Self int64
	// PhysicalCores is the number of physical cores (compute threads).
	PhysicalCores int
	// AVX2 means AVX2+FMA+F16C; AVX512 means F+BW+VL.
	AVX2, AVX512, VNNI bool
	// Storage is "nvme", "ssd", "hdd" or "unknown" for the model's device.
	Storage string
	// Probe is a read test of the model's device (CachedProbe); nil when
	// none ran. The auto profile takes its I/O settings from it, and
	// Storage is then only a hint.
	Probe *StorageProbe
}

// Detect reads the machine k3 is running on. modelPath may be empty.
func Detect(modelPath string) Machine {
	info := meminfo("/proc/meminfo")
	limit, usage := cgroupMemory("/proc/self/cgroup", "/sys/fs/cgroup")
	m := Machine{
		MemTotal:      info["MemTotal"],
		MemAvailable:  info["MemAvailable"],
		CgroupLimit:   limit,
		CgroupUsage:   usage,
		Self:          selfRSS(),
		PhysicalCores: cpuid.CPU.PhysicalCores,
		AVX2:          cpuid.CPU.Supports(cpuid.AVX2, cpuid.FMA3, cpuid.F16C),
		AVX512:        cpuid.CPU.Supports(cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL),
		VNNI:          cpuid.CPU.Supports(cpuid.AVX512VNNI),
		Storage:       "unknown",
	}
	if m.PhysicalCores <= 0 || m.PhysicalCores > runtime.NumCPU() {
		m.PhysicalCores = runtime.NumCPU()
	}
	if modelPath != "" {
		m.Storage = StorageKind(modelPath)
	}
	return m
}

// Auto derives a profile from a machine: a budget under the tighter of
// RAM and the cgroup limit, the best kernels the CPU has, and I/O settings
// for the storage the model is on.
func Auto(m Machine) Profile {
	p := Defaults()
	p.Name = "auto"
	p.Description = "derived from this machine"
	p.Memory.Budget, _ = AutoBudget(m)
	switch {
	case m.AVX512:
		p.Kernels.Name = "avx512"
	case m.AVX2:
		p.Kernels.Name = "avx2"
	default:
		p.Kernels.Name = "reference"
	}
	p.Threads = m.PhysicalCores
	if m.Probe != nil {
		// What the device did, not what it says it is: the fewest
		// readers that reach its bandwidth, and guesses two layers
		// ahead only where a read takes long (under 300 MB/s).
		p.Stager.IOWorkers, p.Stager.PrefetchDepth = m.Probe.Workers(), 1
		if m.Probe.Best() < 300e6 {
			p.Stager.PrefetchDepth = 2
		}
		if !m.Probe.Direct {
			p.Stager.DirectIO = "off"
		}
		return p
	}
	switch m.Storage {
	case "nvme":
		p.Stager.IOWorkers, p.Stager.PrefetchDepth = 8, 1
	case "ssd":
		p.Stager.IOWorkers, p.Stager.PrefetchDepth = 2, 2
	case "hdd":
		p.Stager.IOWorkers, p.Stager.PrefetchDepth = 1, 2
	}
	return p
}

// AutoBudget is the auto profile's memory budget and how it was found.
// In a memory cgroup tighter than RAM it is the limit less a margin
// measured on this process: the cgroup counts k3's three processes (core,
// stager and kernels plugins, each starting at about what this one holds
// now) and page cache the kernel has not yet reclaimed (1/64 of the
// limit), at least 48 MiB. On the bare machine it leaves the OS 1/8 of
// RAM, at least 1 GiB, never more than half. 0: nothing is known.
func AutoBudget(m Machine) (Size, string) {
	switch {
	case m.CgroupLimit > 0 && (m.MemTotal == 0 || m.CgroupLimit < m.MemTotal):
		margin := max(3*m.Self+m.CgroupLimit/64, 48<<20)
		margin = min(margin, m.CgroupLimit/2)
		return Size(m.CgroupLimit - margin), fmt.Sprintf("cgroup limit %s less margin %s (3x %s this process holds + 1/64)",
			Size(m.CgroupLimit), Size(margin), Size(m.Self))
	case m.MemTotal > 0:
		headroom := min(max(m.MemTotal/8, 1<<30), m.MemTotal/2)
		return Size(m.MemTotal - headroom), fmt.Sprintf("MemTotal %s less %s for the OS", Size(m.MemTotal), Size(headroom))
	}
	return 0, ""
}

// CgroupMemoryLimit returns the memory limit of this process's cgroup and
// its ancestors (v2 memory.max or v1 memory.limit_in_bytes), or 0.
func CgroupMemoryLimit() int64 {
	limit, _ := cgroupMemory("/proc/self/cgroup", "/sys/fs/cgroup")
	return limit
}

func readLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// blockDevice is the sysfs directory of the block device holding path
// (/sys/devices/.../nvme0n1/nvme0n1p2 for a partition), or false off a
// block device (tmpfs, overlay).
func blockDevice(path string) (string, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", false
	}
	dev := filepath.Join("/sys/dev/block", strconv.FormatUint(uint64(unix.Major(st.Dev)), 10)+":"+strconv.FormatUint(uint64(unix.Minor(st.Dev)), 10))
	real, err := filepath.EvalSymlinks(dev)
	return real, err == nil
}

// StorageKind says what kind of device holds path: "nvme", "ssd", "hdd"
// or "unknown" (e.g. tmpfs, overlay without a block device).
func StorageKind(path string) string {
	real, ok := blockDevice(path)
	if !ok {
		return "unknown"
	}
	// A partition's queue/ lives in its parent disk's directory.
	for _, dir := range []string{real, filepath.Dir(real)} {
		rot, err := os.ReadFile(filepath.Join(dir, "queue", "rotational"))
		if err != nil {
			continue
		}
		if strings.HasPrefix(filepath.Base(dir), "nvme") {
			return "nvme"
		}
		if strings.TrimSpace(string(rot)) == "1" {
			return "hdd"
		}
		return "ssd"
	}
	return "unknown"
}

// StorageDevice names the block device holding path and its model from
// sysfs ("nvme0n1 (Samsung SSD 990 PRO 2TB)"); "unknown" off a block
// device (tmpfs, overlay).
func StorageDevice(path string) string {
	real, ok := blockDevice(path)
	if !ok {
		return "unknown"
	}
	for _, dir := range []string{real, filepath.Dir(real)} {
		for _, f := range []string{"device/model", "device/device/model"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil && strings.TrimSpace(string(b)) != "" {
				return filepath.Base(dir) + " (" + strings.TrimSpace(string(b)) + ")"
			}
		}
	}
	return filepath.Base(real)
}
