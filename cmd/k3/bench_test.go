package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runBenchJSON(t *testing.T, args ...string) benchRecord {
	t.Helper()
	var out, errb bytes.Buffer
	if code := runMain(append([]string{"bench", "--json"}, args...), &out, &errb); code != 0 {
		t.Fatalf("k3 bench %v: exit %d: %s", args, code, errb.String())
	}
	var rec benchRecord
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		t.Fatalf("k3 bench %v: not one JSON record: %v\n%s", args, err, out.String())
	}
	return rec
}

// checkRecord checks what every record must hold, whatever the timings.
func checkRecord(t *testing.T, rec benchRecord, path string, reps int) {
	t.Helper()
	for name, s := range map[string]benchStat{"prefill": rec.Prefill, "decode": rec.Decode} {
		if len(s.Runs) != reps || s.Mean <= 0 || s.SD < 0 {
			t.Errorf("%s: %+v, want %d positive runs", name, s, reps)
		}
		for _, v := range s.Runs {
			if v <= 0 {
				t.Errorf("%s: run rate %v", name, v)
			}
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	m := rec.Model
	if m.Bytes != st.Size() || m.Files != 1 || m.Arch != "kimi-k3" || m.FileType == "" || len(m.TypeBytes) == 0 {
		t.Errorf("model %+v", m)
	}
	if rec.Memory.VmHWM <= 0 || rec.Memory.MaxRSSSelf <= 0 {
		t.Errorf("memory %+v", rec.Memory)
	}
	if rec.CPU.LogicalCores <= 0 || rec.CPU.Flags == nil || rec.CPU.Vendor == "" {
		t.Errorf("cpu %+v", rec.CPU)
	}
	if rec.Mode.Threads != 2 || !strings.Contains(rec.Mode.Line, "threads=2") || rec.Mode.Kernels == "" {
		t.Errorf("mode %+v", rec.Mode)
	}
}

func TestBenchJSON(t *testing.T) {
	path, _ := tinyModel(t)
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	rec := runBenchJSON(t, "-m", path, "-p", "12", "-n", "5", "-r", "2", "-t", "2", "-ub", "8", "--cpuprofile", prof)
	checkRecord(t, rec, path, 2)
	if rec.Prompt != 12 || rec.Gen != 5 || rec.UBatch != 8 || rec.Storage != nil || rec.Mode.Profile != "none" {
		t.Errorf("record %+v", rec)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("--cpuprofile: %v", err)
	}
}

// TestBenchStaged runs the model through the pread stager in-process with
// the kernels plugin in-process: the storage part of the record is there.
func TestBenchStaged(t *testing.T) {
	t.Setenv("K3_TEST_AS_K3", "1")
	path, _ := tinyModel(t)
	rec := runBenchJSON(t, "-m", path, "-p", "8", "-n", "4", "-r", "1", "-t", "2", "--no-warmup",
		"--profile", "auto", "--memory-budget", "64M", "--stager", "pread", "--stager-mode", "inprocess",
		"--kernels", "auto", "--kernels-mode", "inprocess")
	checkRecord(t, rec, path, 1)
	s := rec.Storage
	if s == nil {
		t.Fatal("no storage numbers through a stager")
	}
	if s.HitRate < 0 || s.HitRate > 1 || s.DecodeWaitShare < 0 || s.DecodeWaitShare > 1 || s.BudgetBytes <= 0 || s.BudgetBytes > 64<<20 {
		t.Errorf("storage %+v", s)
	}
	if s.PrefillBytesPerToken+s.DecodeBytesPerToken <= 0 && s.HitRate == 0 {
		t.Errorf("stager read nothing and hit nothing: %+v", s)
	}
	if b := rec.Boundary; b == nil || b.OpsPerToken <= 0 || b.BatchesPerToken <= 0 {
		t.Errorf("kernels boundary %+v", b)
	}
	// The run's own read rate: each device's bytes over its reads' time
	// per worker, and the bound from it.
	if len(s.Devices) == 0 {
		t.Error("no device read counts from staging-pread")
	}
	var sum float64
	for _, d := range s.Devices {
		if d.BytesRead > 0 && (d.ReadS <= 0 || d.BytesPerSec != float64(d.BytesRead)/(d.ReadS/float64(d.Workers))) {
			t.Errorf("device %+v: rate %g", d, d.BytesPerSec)
		}
		sum += d.BytesPerSec
	}
	if s.RunReadBandwidth != sum || s.DecodeBytesPerToken > 0 && s.StorageBoundDecode != s.RunReadBandwidth/s.DecodeBytesPerToken {
		t.Errorf("run read bandwidth %g (devices sum to %g), bound %g at %g bytes/token", s.RunReadBandwidth, sum, s.StorageBoundDecode, s.DecodeBytesPerToken)
	}
	if rec.Mode.Profile != "auto" || rec.Mode.Stager != "pread" || rec.Mode.Budget != 64<<20 {
		t.Errorf("mode %+v", rec.Mode)
	}
}

func TestBenchTable(t *testing.T) {
	path, _ := tinyModel(t)
	var out, errb bytes.Buffer
	if code := runMain([]string{"bench", "-m", path, "-p", "4", "-n", "2", "-r", "1", "-t", "2"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"prefill", "decode", "peak RSS", "cpu flags", "mode", "tiny.gguf", "kimi-k3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBenchErrors(t *testing.T) {
	path, _ := tinyModel(t)
	for _, args := range [][]string{
		{"-p", "4"},
		{"-m", path, "-p", "0"},
		{"-m", path, "-r", "0"},
		{"-m", path, "-n", "-1"},
		{"-m", path, "--kernels", "avx1024"},
		{"-m", filepath.Join(t.TempDir(), "missing.gguf")},
	} {
		var out, errb bytes.Buffer
		if code := runMain(append([]string{"bench"}, args...), &out, &errb); code == 0 {
			t.Errorf("k3 bench %s succeeded", strings.Join(args, " "))
		}
	}
}

// TestBenchReport: --report writes the Markdown and a self-contained HTML
// page with the build, the machine, the storage test, the rates and the
// decode-time chart for a staged run.
func TestBenchReport(t *testing.T) {
	t.Setenv("K3_TEST_AS_K3", "1")
	path, _ := tinyModel(t)
	prefix := filepath.Join(t.TempDir(), "report")
	rec := runBenchJSON(t, "-m", path, "-p", "8", "-n", "4", "-r", "2", "-t", "2", "--no-warmup",
		"--profile", "auto", "--memory-budget", "64M", "--stager", "pread", "--stager-mode", "inprocess",
		"--kernels", "auto", "--kernels-mode", "inprocess", "--report", prefix)
	if rec.Host == nil || rec.Host.MemTotal <= 0 || rec.Host.Storage == "" || rec.Host.Device == "" {
		t.Errorf("host %+v", rec.Host)
	}
	if rec.K3Version == "" || rec.K3Revision == "" {
		t.Errorf("the record does not name the build: %q %q", rec.K3Version, rec.K3Revision)
	}
	if s := rec.Storage; s == nil || len(s.DecodeSplit) != 2 {
		t.Fatalf("storage %+v: want a decode split per repetition", s)
	}
	for _, sp := range rec.Storage.DecodeSplit {
		if sp.Decode <= 0 || sp.Acquire < 0 || sp.Wait < 0 || sp.Acquire > sp.Decode {
			t.Errorf("split %+v", sp)
		}
	}
	// Every layer of the tiny model has routed experts (none is dense):
	// each gets its acquire and compute time per decoded token.
	if ls := rec.Storage.DecodeLayers; len(ls) == 0 {
		t.Errorf("no per-layer split")
	} else {
		for _, l := range ls {
			if l.ComputeMS <= 0 || l.AcquireMS < 0 {
				t.Errorf("layer %+v", l)
			}
		}
	}
	md, err := os.ReadFile(prefix + ".md")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(prefix + ".html")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"read bandwidth", "decode wait share", "expert cache hit rate", "bytes read per token", "peak RSS", "rep  2 |", "Routed experts per layer", "layer ", rec.K3Version} {
		if !strings.Contains(string(md), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	for _, want := range []string{"<svg", "waiting on storage", "repetition 2", "storage-bound decode rate", "per-layer acquire and compute time", "</html>"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	// Self-contained: nothing to fetch (the SVG namespace is a name, not a fetch).
	for _, ref := range []string{"src=", "href=", "<link", "@import", "url("} {
		if strings.Contains(string(page), ref) {
			t.Errorf("HTML refers to something outside itself: %q", ref)
		}
	}
}
