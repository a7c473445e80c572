package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	goruntime "runtime"
	"runtime/pprof"
	"time"

	"github.com/k3-inference/k3/core/buildinfo"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/runtime"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "measure prefill and decode tokens/s, peak memory and storage traffic; one JSON record with --json",
		run:     runBench,
	})
}

// benchArgs are k3 bench's flags.
type benchArgs struct {
	path, cpuprofile                   *string
	prompt, gen, threads, reps, ubatch *int
	seed                               *uint64
	asJSON, noWarmup                   *bool
	report                             *string
	stage                              *stageFlags
	kernels                            *kernelsFlags
}

func newBenchFlags(stderr io.Writer) (*benchArgs, func([]string) error) {
	fs := newFlags("bench", stderr)
	a := &benchArgs{
		path:       fs.String("m", "", "model file (first shard of a split model)"),
		prompt:     fs.Int("p", 64, "prompt tokens, prefilled in one batch (split in ubatches of -ub)"),
		gen:        fs.Int("n", 32, "decode steps after the prompt"),
		threads:    fs.Int("t", 0, "threads (0: the profile's, else one per CPU)"),
		reps:       fs.Int("r", 3, "repetitions; rates are reported as mean ± sd over them"),
		ubatch:     fs.Int("ub", 0, "prompt tokens per forward call (llama.cpp's n_ubatch); 0: the profile's, else the largest chunk the memory budget allows"),
		seed:       fs.Uint64("seed", 1, "seed of the random prompt and decode tokens"),
		asJSON:     fs.Bool("json", false, "print one JSON record instead of a table"),
		noWarmup:   fs.Bool("no-warmup", false, "skip the unmeasured warm-up run (a prefill and one decode step)"),
		report:     fs.String("report", "", "also write PREFIX.md and PREFIX.html: a self-contained report of the machine, the storage (with a one-second read-bandwidth test) and the run, to paste into an issue"),
		cpuprofile: fs.String("cpuprofile", "", "write a CPU profile of the last repetition's decode steps to this file"),
	}
	fs.StringVar(a.path, "model", "", "same as -m")
	fs.IntVar(a.threads, "threads", 0, "same as -t")
	a.stage = addStageFlags(fs)
	a.kernels = addKernelsFlags(fs)
	return a, func(args []string) error { return parseFlags(fs, args, false) }
}

func runBench(args []string, stdout, stderr io.Writer) error {
	a, parse := newBenchFlags(stderr)
	if err := parse(args); err != nil {
		return err
	}
	if *a.path == "" {
		fmt.Fprintln(stderr, "k3 bench: -m is required")
		return errUsage
	}
	if *a.prompt < 1 || *a.gen < 0 || *a.reps < 1 || *a.ubatch < 0 || *a.threads < 0 {
		fmt.Fprintln(stderr, "k3 bench: -p and -r must be positive, -n, -t and -ub not negative")
		return errUsage
	}
	rec, err := bench(context.Background(), a, stderr)
	if err != nil {
		return err
	}
	if *a.report != "" {
		if err := writeReport(*a.report, rec); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
		fmt.Fprintf(stderr, "k3 bench: wrote %s.md and %s.html\n", *a.report, *a.report)
	}
	if *a.asJSON {
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	return rec.writeTable(stdout)
}

// bench loads the model as the flags say, runs the repetitions and
// returns the record; the plugins are closed before peak memory is read,
// so that the children's peak counts them.
func bench(ctx context.Context, a *benchArgs, stderr io.Writer) (*benchRecord, error) {
	prof, err := a.stage.load(*a.path)
	if err != nil {
		return nil, err
	}
	if prof == nil && *a.kernels.name == "" && *a.kernels.path == "" {
		// A benchmark measures what k3 can do: the best kernels this CPU
		// has, in this process, unless flags or a profile say otherwise.
		*a.kernels.name = "auto"
		if *a.kernels.mode == "" {
			*a.kernels.mode = "inprocess"
		}
	}
	ks := a.kernels.settings(prof)
	o := runtime.Options{Threads: *a.threads, Context: *a.prompt + *a.gen, UBatch: *a.ubatch, Kernels: ks}
	rt, err := runtime.Open(ctx, *a.path, prof, runtimeOptions(o, stderr))
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(stderr, rt.Mode)
	bi := buildinfo.Get()
	rec := &benchRecord{
		Time: time.Now().UTC().Format(time.RFC3339), GoVersion: goruntime.Version(), K3Version: bi.Version, K3Revision: bi.ShortRevision(),
		Prompt: *a.prompt, Gen: *a.gen, Reps: *a.reps, UBatch: rt.UBatch, Threads: rt.Threads, Seed: *a.seed,
		CPU: hostCPU(), Model: describeModel(rt.File), Mode: newBenchMode(rt, ks.Mode),
	}
	if *a.report != "" {
		// Before the run: the test reads with O_DIRECT where it can, so it
		// leaves the page cache as it found it.
		h := measureHost(rt.File.Paths())
		rec.Host = &h
	}
	runErr := runReps(rec, rt, a)
	if rt.Staged != nil && runErr == nil {
		if st, err := rt.Staged.Stats(); err == nil {
			rec.Mode.DirectIO = st.DirectIO
		}
	}
	rt.Close()
	if runErr != nil {
		return nil, runErr
	}
	rec.Memory = peakMemory()
	return rec, nil
}

// runReps runs the warm-up and the measured repetitions and fills in the
// rates and the stager's and kernels boundary's numbers.
func runReps(rec *benchRecord, rt *runtime.Runtime, a *benchArgs) error {
	rng := rand.New(rand.NewPCG(*a.seed, 0x6b3))
	lm, kb := rt.Model, rt.Kernels
	vocab := lm.Params().Vocab
	tokens := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = int32(rng.IntN(vocab))
		}
		return t
	}
	if !*a.noWarmup {
		if _, _, err := benchRun(lm, tokens(*a.prompt), tokens(1), rt.UBatch, nil); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	var acc stageAcc
	var last *phaseHook
	for i := range *a.reps {
		var hook *phaseHook
		if rt.Staged != nil || i == *a.reps-1 {
			hook = &phaseHook{staged: rt.Staged, acc: &acc, kernels: kb}
			if i == *a.reps-1 {
				hook.profile = *a.cpuprofile
				last = hook
			}
		}
		pre, dec, err := benchRun(lm, tokens(*a.prompt), tokens(*a.gen), rt.UBatch, hook)
		if err != nil {
			return fmt.Errorf("repetition %d: %w", i+1, err)
		}
		if hook != nil && hook.err != nil {
			return hook.err
		}
		rec.Prefill.Runs = append(rec.Prefill.Runs, float64(*a.prompt)/pre.Seconds())
		if *a.gen > 0 {
			rec.Decode.Runs = append(rec.Decode.Runs, float64(*a.gen)/dec.Seconds())
		}
		acc.decodeTime += dec
		if n := len(acc.splits); rt.Staged != nil && n > 0 {
			acc.splits[n-1].Decode = dec.Seconds()
		}
	}
	rec.Prefill.summarize()
	rec.Decode.summarize()
	if rt.Staged != nil {
		rec.Storage = acc.report(*a.prompt**a.reps, *a.gen**a.reps)
	}
	rec.Boundary = newBoundary(last.kat[2], last.kat[1], *a.gen)
	return nil
}

// phaseHook runs between a repetition's phases: it snapshots the stager's
// and the kernels boundary's counters and starts and stops the CPU profile
// around the decode steps.
type phaseHook struct {
	staged  *engine.Staged
	acc     *stageAcc
	kernels engine.Kernels
	profile string
	file    *os.File
	at      [3]engine.StageStats
	kat     [3]engine.KernelsStats
	err     error
}

// mark is called with phase 0 before the prefill, 1 between prefill and
// decode, 2 after the decode.
func (h *phaseHook) mark(phase int) {
	if phase == 2 && h.file != nil {
		pprof.StopCPUProfile()
		if err := h.file.Close(); err != nil && h.err == nil {
			h.err = fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	if h.staged != nil {
		st, err := h.staged.Stats()
		if err != nil && h.err == nil {
			h.err = fmt.Errorf("stager stats: %w", err)
		}
		h.at[phase] = st
		if phase == 2 {
			h.acc.add(h.at)
		}
	}
	if phase == 1 && h.profile != "" {
		f, err := os.Create(h.profile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			h.err = fmt.Errorf("--cpuprofile: %w", err)
			return
		}
		h.file = f
	}
	h.kat[phase] = kernelsStats(h.kernels)
}

// benchRun evaluates prompt on a fresh sequence in ubatches, then feeds
// each of gen as a decode step, and returns both phases' wall times.
func benchRun(lm model.Model, prompt, gen []int32, ubatch int, hook *phaseHook) (prefill, decode time.Duration, err error) {
	mark := func(p int) {
		if hook != nil {
			hook.mark(p)
		}
	}
	r := engine.NewRunner(lm, engine.Batch, ubatch)
	r.SetContext(len(prompt) + len(gen))
	mark(0)
	start := time.Now()
	if _, err := r.Prefill(prompt, false); err != nil {
		return 0, 0, fmt.Errorf("prefill of %d tokens: %w", len(prompt), err)
	}
	prefill = time.Since(start)
	mark(1)
	start = time.Now()
	for i, tok := range gen {
		if _, err := r.Decode(tok); err != nil {
			mark(2)
			return 0, 0, fmt.Errorf("decode step %d: %w", i+1, err)
		}
	}
	decode = time.Since(start)
	mark(2)
	return prefill, decode, nil
}

// stageAcc sums the stager's counters over the measured repetitions.
type stageAcc struct {
	prefillBytes, decodeBytes int64
	hits, misses              uint64
	decodeHits, decodeMisses  uint64
	decodeWait, decodeAcquire time.Duration
	decodeTime                time.Duration
	last                      engine.StageStats
	predicted, predictedRight uint64
	splits                    []benchSplit
	layers                    []engine.LayerTime // decode, summed
	decodeAcquires            uint64
}

func (a *stageAcc) add(at [3]engine.StageStats) {
	pre, dec := at[1].Stats, at[2].Stats
	a.prefillBytes += pre.BytesRead - at[0].BytesRead
	a.decodeBytes += dec.BytesRead - pre.BytesRead
	a.hits += dec.Hits - at[0].Hits
	a.misses += dec.Misses - at[0].Misses
	a.decodeHits += dec.Hits - pre.Hits
	a.decodeMisses += dec.Misses - pre.Misses
	a.decodeWait += dec.WaitTime - pre.WaitTime
	a.decodeAcquire += at[2].AcquireTime - at[1].AcquireTime
	a.decodeAcquires += at[2].Acquires - at[1].Acquires
	for i, l := range at[2].Layers {
		if i >= len(a.layers) {
			a.layers = append(a.layers, make([]engine.LayerTime, i+1-len(a.layers))...)
		}
		a.layers[i].Acquire += l.Acquire
		a.layers[i].Compute += l.Compute
		if i < len(at[1].Layers) {
			a.layers[i].Acquire -= at[1].Layers[i].Acquire
			a.layers[i].Compute -= at[1].Layers[i].Compute
		}
	}
	a.predicted += at[2].Predicted - at[0].Predicted
	a.predictedRight += at[2].PredictedRight - at[0].PredictedRight
	a.last = at[2]
	a.splits = append(a.splits, benchSplit{Acquire: (at[2].AcquireTime - at[1].AcquireTime).Seconds(),
		Wait: (dec.WaitTime - pre.WaitTime).Seconds()})
}

func (a *stageAcc) report(prefillTokens, decodeTokens int) *benchStorage {
	s := &benchStorage{
		Stager: a.last.Mode, Restarts: a.last.Restarts, DirectIO: a.last.DirectIO,
		ResidentBytes: a.last.ResidentBytes, BudgetBytes: a.last.BudgetBytes,
		PrefillBytesPerToken:   ratio(float64(a.prefillBytes), float64(prefillTokens)),
		DecodeBytesPerToken:    ratio(float64(a.decodeBytes), float64(decodeTokens)),
		HitRate:                ratio(float64(a.hits), float64(a.hits+a.misses)),
		DecodeHitRate:          ratio(float64(a.decodeHits), float64(a.decodeHits+a.decodeMisses)),
		DecodeWaitShare:        ratio(a.decodeWait.Seconds(), a.decodeTime.Seconds()),
		DecodeAcquireShare:     ratio(a.decodeAcquire.Seconds(), a.decodeTime.Seconds()),
		LookaheadPrecision:     ratio(float64(a.predictedRight), float64(a.predicted)),
		DecodeSplit:            a.splits,
		DecodeAcquiresPerToken: ratio(float64(a.decodeAcquires), float64(decodeTokens)),
	}
	for _, d := range a.last.Devices {
		bd := benchDevice{Name: d.Name, Workers: d.Workers, Shards: d.Shards, Reads: d.Reads, BytesRead: d.BytesRead, ReadS: d.ReadTime.Seconds()}
		bd.BytesPerSec = ratio(float64(d.BytesRead), bd.ReadS/float64(max(d.Workers, 1)))
		s.RunReadBandwidth += bd.BytesPerSec
		s.Devices = append(s.Devices, bd)
	}
	s.StorageBoundDecode = ratio(s.RunReadBandwidth, s.DecodeBytesPerToken)
	for i, l := range a.layers {
		if l.Acquire > 0 || l.Compute > 0 {
			ms := func(d time.Duration) float64 { return ratio(float64(d)/1e6, float64(decodeTokens)) }
			s.DecodeLayers = append(s.DecodeLayers, benchLayer{Layer: i, AcquireMS: ms(l.Acquire), ComputeMS: ms(l.Compute)})
		}
	}
	return s
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// newBenchMode is the mode line's fields; kernelsMode is how the kernels
// were asked to run.
func newBenchMode(rt *runtime.Runtime, kernelsMode string) benchMode {
	m := rt.Mode
	return benchMode{Line: m.String(), Profile: m.Profile, Stager: m.Stager, StagerMode: m.StagerMode,
		Kernels: rt.Kernels.Name(), KernelsMode: kernelsMode, Budget: int64(m.Budget), Threads: m.Threads}
}
