package parity

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/k3-inference/k3/core/quant"
)

// BenchOptions set up Bench; zero values take k3ref's defaults.
type BenchOptions struct {
	Threads  int    // 0: 1 thread
	Prompt   int    // prompt tokens in one llama_decode; 0: 64
	Gen      int    // decode steps after the prompt; 0: 32 (use NoGen for none)
	NoGen    bool   // measure the prompt only
	Reps     int    // 0: 3
	UBatch   int    // n_ubatch; 0: 512 (capped at Prompt)
	NoRepack bool   // keep weights in the file's layout, as k3 does
	NoWarmup bool   // skip the unmeasured warm-up run
	CPU      string // CPU variant; "": Native
	Seed     uint64 // random token stream; 0: 1
	// Poll is how hard the threadpool's idle workers spin before sleeping
	// (llama-bench's --poll); nil: 50, llama-bench's default.
	Poll *int
}

func (o BenchOptions) args() []string {
	var a []string
	add := func(flag string, v int) {
		if v > 0 {
			a = append(a, flag, strconv.Itoa(v))
		}
	}
	add("--threads", o.Threads)
	add("-p", o.Prompt)
	add("-n", o.Gen)
	if o.NoGen {
		a = append(a, "-n", "0")
	}
	add("--reps", o.Reps)
	add("--batch", o.UBatch)
	if o.NoRepack {
		a = append(a, "--no-repack")
	}
	if o.NoWarmup {
		a = append(a, "--no-warmup")
	}
	if o.CPU != "" {
		a = append(a, "--cpu", o.CPU)
	}
	if o.Seed != 0 {
		a = append(a, "--seed", strconv.FormatUint(o.Seed, 10))
	}
	if o.Poll != nil {
		a = append(a, "--poll", strconv.Itoa(*o.Poll))
	}
	return a
}

// Rate is a tokens/s figure over repetitions (sample standard deviation).
type Rate struct {
	Mean float64   `json:"mean"`
	SD   float64   `json:"sd"`
	Runs []float64 `json:"runs"`
}

// BenchResult is llama.cpp's speed on a model, measured as llama-bench
// does: a warm-up run, then per repetition a cleared sequence, Prompt
// random tokens in one llama_decode and Gen single-token llama_decode
// calls, with a threadpool of Threads attached.
type BenchResult struct {
	Prompt     int     `json:"prompt_tokens"`
	Gen        int     `json:"decode_tokens"`
	Reps       int     `json:"reps"`
	Threads    int     `json:"threads"`
	UBatch     int     `json:"ubatch"`
	Poll       int     `json:"poll"`
	Repack     bool    `json:"repack"`
	CPUVariant string  `json:"cpu_variant"`
	LoadSecs   float64 `json:"load_s"`
	ModelBytes uint64  `json:"model_bytes"`
	NParams    uint64  `json:"n_params"`
	Prefill    Rate    `json:"prefill_tok_s"`
	Decode     Rate    `json:"decode_tok_s"`
	SystemInfo string  `json:"system_info"`
}

// Bench measures llama.cpp's prefill and decode tokens/s on model.
func (r *Ref) Bench(model string, o BenchOptions) (*BenchResult, error) {
	var res BenchResult
	if err := r.runJSON(&res, nil, append([]string{"bench", model}, o.args()...)...); err != nil {
		return nil, asLoadError(err, model)
	}
	return &res, nil
}

// MatVecOptions set up MatVec; zero values take k3ref's defaults.
type MatVecOptions struct {
	Rows, Cols int     // weight matrix shape; 0: 4096 each
	Threads    int     // 0: 1
	Seconds    float64 // measuring time per type; 0: 1 s
	// Repack puts the weights in the CPU_REPACK buffer type where ggml has
	// an interleaved layout for the type (as llama.cpp does by default).
	Repack bool
	CPU    string // CPU variant; "": Native
}

// MatVecResult is ggml's matrix × vector throughput per type.
type MatVecResult struct {
	CPUVariant string `json:"cpu_variant"`
	Threads    int    `json:"threads"`
	Rows       int    `json:"rows"`
	Cols       int    `json:"cols"`
	Repack     bool   `json:"repack"`
	Results    []struct {
		Type        string  `json:"type"` // ggml's type name
		WeightBytes int64   `json:"weight_bytes"`
		Repacked    bool    `json:"repacked"`
		Reps        int     `json:"reps"`
		BestUS      float64 `json:"best_us"`
		MedianUS    float64 `json:"median_us"`
		MeanUS      float64 `json:"mean_us"`
		GBpsBest    float64 `json:"gbps_best"`
		GBpsMedian  float64 `json:"gbps_median"`
		GBpsMean    float64 `json:"gbps_mean"`
	} `json:"results"`
}

// MatVec times one ggml_mul_mat of a Rows×Cols weight matrix of each type
// by an f32 vector on ggml's CPU backend (the activation is quantized to
// the type's vec_dot_type inside, as in a decode step), computed with a
// threadpool of o.Threads, repeated for o.Seconds; the throughput is
// weight bytes per second.
func (r *Ref) MatVec(types []quant.Type, o MatVecOptions) (*MatVecResult, error) {
	if len(types) == 0 {
		return nil, fmt.Errorf("parity: matvec: no types")
	}
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = typeArg(t)
	}
	args := []string{"matvec", strings.Join(names, ",")}
	add := func(flag string, v int) {
		if v > 0 {
			args = append(args, flag, strconv.Itoa(v))
		}
	}
	add("--rows", o.Rows)
	add("--cols", o.Cols)
	add("--threads", o.Threads)
	if o.Seconds > 0 {
		args = append(args, "--seconds", strconv.FormatFloat(o.Seconds, 'g', -1, 64))
	}
	if o.Repack {
		args = append(args, "--repack")
	}
	if o.CPU != "" {
		args = append(args, "--cpu", o.CPU)
	}
	var res MatVecResult
	if err := r.runJSON(&res, nil, args...); err != nil {
		return nil, err
	}
	if len(res.Results) != len(types) {
		return nil, fmt.Errorf("parity: matvec: %d results for %d types", len(res.Results), len(types))
	}
	return &res, nil
}
