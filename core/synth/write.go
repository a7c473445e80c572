package synth

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/k3-inference/k3/core/gguf"
)

// WriteOptions controls Write.
type WriteOptions struct {
	// Split cuts the file into llama-gguf-split shards.
	Split gguf.SplitOptions
	// Workers generating and quantizing rows; 0 means GOMAXPROCS.
	Workers int
}

// Result describes what Write wrote.
type Result struct {
	Paths   []string
	Bytes   int64 // total size of the files
	Tensors int
	Elapsed time.Duration
}

// GBps is the write rate in 10^9 bytes per second.
func (r *Result) GBps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes) / r.Elapsed.Seconds() / 1e9
}

// Plan returns the tensors (name, type, shape) a file for cfg holds, in
// file order, without writing anything.
func Plan(cfg Config) ([]gguf.TensorSpec, error) {
	defs, err := tensorDefs(&cfg)
	if err != nil {
		return nil, err
	}
	specs := make([]gguf.TensorSpec, len(defs))
	for i, d := range defs {
		specs[i] = gguf.TensorSpec{Name: d.Name, Type: d.Type, Shape: d.Shape}
	}
	return specs, nil
}

// chunkBytes is the unit of work handed to a worker: big enough to keep
// the per-job overhead small, small enough that a few in flight per worker
// stay a few tens of MB.
const chunkBytes = 4 << 20

// job is one run of rows of one tensor.
type job struct {
	m     *rowMaker
	first int64
	n     int64
	out   chan jobResult
}

type jobResult struct {
	buf []byte
	err error
}

// Write generates the checkpoint described by cfg into path (or, with
// o.Split, into PREFIX-0000i-of-0000N.gguf shards) and returns what it
// wrote. Rows are generated and quantized in parallel and streamed in file
// order, so memory stays bounded whatever the model size.
func Write(path string, cfg Config, o WriteOptions) (*Result, error) {
	start := time.Now()
	defs, err := tensorDefs(&cfg)
	if err != nil {
		return nil, err
	}
	newVocab := func(c *Config) (*Vocab, error) { return NewVocab(c.NVocab) }
	switch cfg.Arch {
	case ArchDeepSeek2:
		newVocab = deepseek2Vocab
	case ArchQwen3MoE:
		newVocab = func(c *Config) (*Vocab, error) { return newQwenVocab(c.NVocab) }
	}
	vocab, err := newVocab(&cfg)
	if err != nil {
		return nil, err
	}
	specs := make([]gguf.TensorSpec, len(defs))
	for i, d := range defs {
		specs[i] = gguf.TensorSpec{Name: d.Name, Type: d.Type, Shape: d.Shape}
	}
	w, err := gguf.Create(path, metadata(&cfg, vocab), specs, gguf.WriteOptions{Split: o.Split})
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	if err := stream(w, defs, cfg.Seed, o.Workers); err != nil {
		w.Close() // removes the partial files
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	res := &Result{Paths: w.Paths(), Tensors: len(defs)}
	for _, p := range res.Paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
		res.Bytes += st.Size()
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// stream feeds every tensor's bytes to w in order. A producer cuts tensors
// into jobs, workers fill them, and this goroutine writes the results in
// the order the jobs were issued.
func stream(w *gguf.Writer, defs []tensorDef, seed uint64, workers int) error {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	depth := 2 * workers
	work := make(chan job, depth)
	order := make(chan chan jobResult, depth)
	done := make(chan struct{})
	var prodErr error
	go func() {
		defer close(order)
		defer close(work)
		prodErr = produce(defs, seed, work, order, done)
	}()
	// A fixed set of buffers, reused: fresh 4 MB allocations are
	// page-faulted in and zeroed for every chunk, which costs more system
	// time than writing them. At most depth+1 jobs are issued and not yet
	// written, so workers never wait on a buffer the writer still needs.
	free := make(chan []byte, depth+1)
	for range cap(free) {
		free <- make([]byte, 0, chunkBytes)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var src []float32
			for j := range work {
				if need := int(j.m.def.rowLen()); len(src) < need {
					src = make([]float32, need)
				}
				var buf []byte
				select {
				case buf = <-free:
				case <-done:
					j.out <- jobResult{err: errors.New("synth: write abandoned")}
					continue
				}
				if n := int(j.n) * j.m.rowBytes; cap(buf) >= n {
					buf = buf[:n]
				} else {
					buf = make([]byte, n) // one row longer than chunkBytes
				}
				err := j.m.rows(j.first, j.n, buf, src)
				j.out <- jobResult{buf, err}
			}
		}()
	}
	var err error
	for ch := range order {
		if err != nil {
			continue // a job issued after the failure may never run
		}
		r := <-ch
		err = r.err
		if err == nil {
			if _, werr := w.Write(r.buf); werr != nil {
				err = fmt.Errorf("synth: %w", werr)
			}
			free <- r.buf[:0]
		}
		if err != nil {
			close(done)
		}
	}
	wg.Wait()
	if err == nil {
		err = prodErr
	}
	return err
}

// makerAhead is how many tensors' row makers are prepared ahead of the one
// being cut into jobs: building a quantized pool takes a moment, and ahead
// of time it overlaps with writing instead of stalling the workers.
const makerAhead = 2

type makerResult struct {
	m   *rowMaker
	err error
}

func produce(defs []tensorDef, seed uint64, work chan<- job, order chan<- chan jobResult, done <-chan struct{}) error {
	makers := make(chan makerResult, makerAhead)
	go func() {
		defer close(makers)
		for i := range defs {
			m, err := newRowMaker(&defs[i], seed)
			select {
			case makers <- makerResult{m, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for i := range defs {
		mr, ok := <-makers
		if !ok {
			return errors.New("synth: write abandoned")
		}
		if mr.err != nil {
			return mr.err
		}
		m := mr.m
		per := max(1, int64(chunkBytes/m.rowBytes))
		rows := defs[i].rows()
		for first := int64(0); first < rows; first += per {
			j := job{m: m, first: first, n: min(per, rows-first), out: make(chan jobResult, 1)}
			select {
			case order <- j.out:
			case <-done:
				return errors.New("synth: write abandoned")
			}
			select {
			case work <- j:
			case <-done:
				// the writer already failed and reads no more results
				return errors.New("synth: write abandoned")
			}
		}
	}
	return nil
}
