package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/klauspost/cpuid/v2"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
)

// benchRecord is what k3 bench measured, as users share it: the machine,
// the model, how k3 ran it and the rates. Field names are stable; add,
// never rename.
type benchRecord struct {
	Time      string `json:"time"`
	GoVersion string `json:"go_version"`
	// K3Version and K3Revision name the build (core/buildinfo).
	K3Version  string `json:"k3_version"`
	K3Revision string `json:"k3_revision"`
	Prompt     int    `json:"prompt_tokens"`
	Gen        int    `json:"decode_tokens"`
	Reps       int    `json:"reps"`
	UBatch     int    `json:"ubatch"`
	Threads    int    `json:"threads"`
	Seed       uint64 `json:"seed"`

	Prefill benchStat `json:"prefill_tok_s"`
	Decode  benchStat `json:"decode_tok_s"`

	Memory   benchMemory    `json:"memory"`
	Storage  *benchStorage  `json:"storage"` // null without a stager (weights mapped from the file)
	Boundary *benchBoundary `json:"kernels_boundary,omitempty"`
	Mode     benchMode      `json:"mode"`
	CPU      benchCPU       `json:"cpu"`
	Model    benchModel     `json:"model"`
	Host     *benchHost     `json:"host,omitempty"` // with --report
}

// benchStat is a rate over the repetitions.
type benchStat struct {
	Mean float64   `json:"mean"`
	SD   float64   `json:"sd"` // sample standard deviation; 0 for one repetition
	Runs []float64 `json:"runs"`
}

func (s *benchStat) summarize() {
	n := float64(len(s.Runs))
	if n == 0 {
		return
	}
	var sum float64
	for _, v := range s.Runs {
		sum += v
	}
	s.Mean = sum / n
	if n > 1 {
		var ss float64
		for _, v := range s.Runs {
			ss += (v - s.Mean) * (v - s.Mean)
		}
		s.SD = math.Sqrt(ss / (n - 1))
	}
}

// benchMemory is peak resident memory: this process's high-water mark
// (VmHWM, which counts mapped file pages it touched) and getrusage's
// maxrss of itself and of its largest finished child (plugin processes,
// closed before this is read).
type benchMemory struct {
	VmHWM          int64 `json:"vm_hwm_bytes"`
	MaxRSSSelf     int64 `json:"maxrss_self_bytes"`
	MaxRSSChildren int64 `json:"maxrss_children_bytes"`
}

func peakMemory() benchMemory {
	var m benchMemory
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		m.MaxRSSSelf = ru.Maxrss << 10
	}
	if syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru) == nil {
		m.MaxRSSChildren = ru.Maxrss << 10
	}
	m.VmHWM = procStatusBytes("VmHWM")
	return m
}

// procStatusBytes reads a "kB" field of /proc/self/status; 0 where there
// is none (not Linux).
func procStatusBytes(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// benchStorage is the stager's share of the run, summed over the measured
// repetitions.
type benchStorage struct {
	Stager               string  `json:"stager"`
	Restarts             int     `json:"restarts"`
	DirectIO             bool    `json:"direct_io"`
	PrefillBytesPerToken float64 `json:"prefill_bytes_read_per_token"`
	DecodeBytesPerToken  float64 `json:"decode_bytes_read_per_token"`
	HitRate              float64 `json:"expert_hit_rate"`
	DecodeHitRate        float64 `json:"decode_expert_hit_rate"`
	DecodeWaitShare      float64 `json:"decode_wait_share"`    // of decode wall time, blocked on storage
	DecodeAcquireShare   float64 `json:"decode_acquire_share"` // of decode wall time, in acquire (waits plus IPC)
	LookaheadPrecision   float64 `json:"lookahead_precision"`
	ResidentBytes        int64   `json:"resident_bytes"`
	BudgetBytes          int64   `json:"stager_budget_bytes"`
	// DecodeSplit is each repetition's decode time and how much of it went
	// to acquiring experts and, of that, to waiting on storage.
	DecodeSplit []benchSplit `json:"decode_split,omitempty"`
	// DecodeLayers splits the routed experts' decode time by layer, per
	// generated token: the wait to acquire them (storage and IPC) and
	// their products.
	DecodeLayers []benchLayer `json:"decode_layers,omitempty"`
	// DecodeAcquiresPerToken is the stager round trips for experts per
	// generated token.
	DecodeAcquiresPerToken float64 `json:"decode_acquires_per_token"`
	// Devices splits the stager's reads (since it opened) by the device
	// groups it reads through, each with its own workers.
	Devices []benchDevice `json:"devices,omitempty"`
	// RunReadBandwidth is what the storage gave the stager's own reads in
	// this run, summed over its devices (each device's bytes_per_second),
	// and StorageBoundDecode that over the decode bytes per token: the
	// storage-bound decode rate from the run itself. The --report read
	// test before the run can see a faster disk than the run does (a
	// virtual disk's host cache, other tenants).
	RunReadBandwidth   float64 `json:"run_read_bandwidth_bytes_per_second"`
	StorageBoundDecode float64 `json:"storage_bound_decode_tok_s"`
}

// benchDevice is one device group's reads since the stager opened.
type benchDevice struct {
	Name      string  `json:"name"`
	Workers   int     `json:"workers"`
	Shards    []int   `json:"shards"`
	Reads     uint64  `json:"reads"`
	BytesRead int64   `json:"bytes_read"`
	ReadS     float64 `json:"read_seconds"` // summed latency of its reads
	// BytesPerSec is BytesRead over ReadS / Workers: the device's rate at
	// the stager's queue depth while its reads were in flight.
	BytesPerSec float64 `json:"bytes_per_second"`
}

// benchLayer is one layer's routed-expert time per decoded token.
type benchLayer struct {
	Layer     int     `json:"layer"`
	AcquireMS float64 `json:"acquire_ms_per_token"`
	ComputeMS float64 `json:"compute_ms_per_token"`
}

// benchSplit is one repetition's decode wall time and its parts.
type benchSplit struct {
	Decode  float64 `json:"decode_seconds"`
	Acquire float64 `json:"acquire_seconds"` // waits plus IPC
	Wait    float64 `json:"wait_seconds"`    // blocked on storage reads
}

// benchBoundary is what a kernels plugin's boundary cost in the last
// repetition's decode, per token.
type benchBoundary struct {
	BatchesPerToken float64 `json:"batches_per_token"`
	OpsPerToken     float64 `json:"ops_per_token"`
	BoundaryMS      float64 `json:"boundary_ms_per_token"`
	ComputeMS       float64 `json:"plugin_compute_ms_per_token"`
	CopiedBytes     float64 `json:"copied_bytes_per_token"`
	Fallbacks       int     `json:"fallback_ops"`
	Restarts        int     `json:"restarts"`
}

// newBoundary is the boundary's cost between at and end (the last
// repetition's decode steps) per decode token.
func newBoundary(end, at engine.KernelsStats, tokens int) *benchBoundary {
	if end.Batches == at.Batches {
		return nil
	}
	per := func(v float64) float64 { return v / float64(max(tokens, 1)) }
	return &benchBoundary{
		BatchesPerToken: per(float64(end.Batches - at.Batches)), OpsPerToken: per(float64(end.Ops - at.Ops)),
		BoundaryMS:  per(((end.Wall - at.Wall) - (end.Compute - at.Compute)).Seconds() * 1e3),
		ComputeMS:   per((end.Compute - at.Compute).Seconds() * 1e3),
		CopiedBytes: per(float64(end.CopiedBytes - at.CopiedBytes)),
		Fallbacks:   end.Fallbacks, Restarts: end.Restarts,
	}
}

// benchMode is the mode line, as fields and as printed.
type benchMode struct {
	Line        string `json:"line"`
	Profile     string `json:"profile"`
	Stager      string `json:"stager"`
	StagerMode  string `json:"stager_mode,omitempty"`
	Kernels     string `json:"kernels"`
	KernelsMode string `json:"kernels_mode"`
	Budget      int64  `json:"budget_bytes"` // 0: unlimited
	DirectIO    bool   `json:"direct_io"`
	Threads     int    `json:"threads"`
}

// benchCPU is the processor as cpuid sees it.
type benchCPU struct {
	Brand         string   `json:"brand"`
	Vendor        string   `json:"vendor"`
	Family        int      `json:"family"`
	Model         int      `json:"model"`
	PhysicalCores int      `json:"physical_cores"`
	LogicalCores  int      `json:"logical_cores"`
	L2            int      `json:"l2_bytes"`
	L3            int      `json:"l3_bytes"`
	Flags         []string `json:"flags"` // the SIMD features kernels care about
}

// simdFeatures are the features that decide which kernels run.
var simdFeatures = []cpuid.FeatureID{
	cpuid.SSE4, cpuid.AVX, cpuid.AVX2, cpuid.FMA3, cpuid.F16C, cpuid.BMI2,
	cpuid.AVX512F, cpuid.AVX512DQ, cpuid.AVX512BW, cpuid.AVX512VL, cpuid.AVX512VNNI,
	cpuid.AVX512BF16, cpuid.AVX512VBMI, cpuid.AVXVNNI, cpuid.AMXINT8, cpuid.AMXBF16,
}

func hostCPU() benchCPU {
	c := cpuid.CPU
	out := benchCPU{
		Brand: c.BrandName, Vendor: c.VendorString, Family: c.Family, Model: c.Model,
		PhysicalCores: c.PhysicalCores, LogicalCores: c.LogicalCores, L2: c.Cache.L2, L3: c.Cache.L3,
		Flags: []string{},
	}
	// In a VM cpuid can describe the host's package (254 cores on a 2-vCPU
	// guest): the record names the CPUs this process can run on.
	if n := runtime.NumCPU(); out.LogicalCores <= 0 || out.LogicalCores > n {
		out.LogicalCores = n
	}
	if out.PhysicalCores <= 0 || out.PhysicalCores > out.LogicalCores {
		out.PhysicalCores = out.LogicalCores
	}
	for _, f := range simdFeatures {
		if c.Supports(f) {
			out.Flags = append(out.Flags, f.String())
		}
	}
	return out
}

// benchModel is the model file: its size on disk and what its weights are.
type benchModel struct {
	Path      string           `json:"path"`
	Files     int              `json:"files"`
	Bytes     int64            `json:"bytes"`
	Arch      string           `json:"arch"`
	Name      string           `json:"name"`
	FileType  string           `json:"file_type"`
	TypeBytes map[string]int64 `json:"tensor_bytes_by_type"`
}

func describeModel(f *gguf.File) benchModel {
	m := benchModel{Path: f.Path(), Files: len(f.Paths()), Arch: f.Arch(), Name: f.String("general.name", ""),
		TypeBytes: map[string]int64{}}
	for _, p := range f.Paths() {
		if st, err := os.Stat(p); err == nil {
			m.Bytes += st.Size()
		}
	}
	m.FileType = "unknown"
	if v, ok := f.Lookup("general.file_type"); ok {
		if n, ok := asUint(v.V); ok {
			m.FileType = fileTypeName(n)
		}
	}
	for _, t := range f.Tensors() {
		m.TypeBytes[t.Type.String()] += t.Size
	}
	return m
}

func asUint(v any) (uint64, bool) {
	switch x := v.(type) {
	case uint32:
		return uint64(x), true
	case int32:
		return uint64(x), x >= 0
	case uint64:
		return x, true
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// fileTypeNames are llama_ftype's names (llama.h) for the types k3 runs.
var fileTypeNames = map[uint64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 7: "Q8_0", 8: "Q5_0", 10: "Q2_K", 11: "Q3_K_S", 12: "Q3_K_M",
	13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 21: "Q2_K_S",
	32: "BF16", 38: "MXFP4_MOE",
	3: "Q4_1", 9: "Q5_1", 19: "IQ2_XXS", 20: "IQ2_XS", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
	26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 36: "TQ1_0", 37: "TQ2_0",
}

func fileTypeName(n uint64) string {
	if s, ok := fileTypeNames[n]; ok {
		return s
	}
	return "ftype " + strconv.FormatUint(n, 10)
}

// writeTable prints the record for a person.
func (r *benchRecord) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	gib := func(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
	rate := func(s benchStat) string {
		return fmt.Sprintf("%.2f ± %.2f tok/s\t(%d runs)", s.Mean, s.SD, len(s.Runs))
	}
	var types []string
	for t, b := range r.Model.TypeBytes {
		types = append(types, fmt.Sprintf("%s %s", t, gib(b)))
	}
	sort.Strings(types)
	fmt.Fprintf(tw, "model\t%s (%s, %s, %s in %d file(s))\n", r.Model.Path, r.Model.Arch, r.Model.FileType, gib(r.Model.Bytes), r.Model.Files)
	fmt.Fprintf(tw, "weights\t%s\n", strings.Join(types, ", "))
	l3 := "unknown"
	if r.CPU.L3 > 0 {
		l3 = fmt.Sprintf("%d MiB", r.CPU.L3>>20)
	}
	fmt.Fprintf(tw, "cpu\t%s, %d cores, %d threads, L2 %d KiB, L3 %s\n", r.CPU.Brand, r.CPU.PhysicalCores, r.CPU.LogicalCores, r.CPU.L2>>10, l3)
	fmt.Fprintf(tw, "cpu flags\t%s\n", strings.Join(r.CPU.Flags, " "))
	fmt.Fprintf(tw, "mode\t%s\n", r.Mode.Line)
	fmt.Fprintf(tw, "run\tp=%d n=%d ub=%d threads=%d reps=%d\n", r.Prompt, r.Gen, r.UBatch, r.Threads, r.Reps)
	fmt.Fprintf(tw, "prefill\t%s\n", rate(r.Prefill))
	fmt.Fprintf(tw, "decode\t%s\n", rate(r.Decode))
	fmt.Fprintf(tw, "peak RSS\t%s (VmHWM), children %s\n", gib(r.Memory.VmHWM), gib(r.Memory.MaxRSSChildren))
	if s := r.Storage; s != nil {
		fmt.Fprintf(tw, "storage\t%.1f MiB/token decode, %.1f MiB/token prefill, direct I/O %v\n",
			s.DecodeBytesPerToken/(1<<20), s.PrefillBytesPerToken/(1<<20), s.DirectIO)
		fmt.Fprintf(tw, "expert cache\t%.1f%% hits (decode %.1f%%), decode waits on storage %.1f%% of the time\n",
			100*s.HitRate, 100*s.DecodeHitRate, 100*s.DecodeWaitShare)
		if len(s.Devices) > 1 {
			for _, d := range s.Devices {
				fmt.Fprintf(tw, "device %s	%d workers, shards %v: %d reads, %.1f MiB, %.2f GB/s\n", d.Name, d.Workers, d.Shards, d.Reads, float64(d.BytesRead)/(1<<20), d.BytesPerSec/1e9)
			}
		}
		if s.StorageBoundDecode > 0 {
			fmt.Fprintf(tw, "storage bound\t%.3f tok/s decode (the stager's reads got %.2f GB/s in this run)\n", s.StorageBoundDecode, s.RunReadBandwidth/1e9)
		}
	} else {
		fmt.Fprintf(tw, "storage\tnone (weights mapped from the file)\n")
	}
	if b := r.Boundary; b != nil {
		fmt.Fprintf(tw, "kernels boundary\t%.2f ms/token outside the plugin's compute, %.0f batches/token\n", b.BoundaryMS, b.BatchesPerToken)
	}
	return tw.Flush()
}
