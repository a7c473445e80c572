package ops

import (
	"runtime"

	"github.com/k3-inference/k3/core/parallel"
)

// Pool splits loops over rows between a fixed number of goroutines.
type Pool struct {
	threads int
	backend Backend // nil: Reference
}

// NewPool returns a pool of n workers; n <= 0 means one per CPU.
func NewPool(n int) *Pool {
	if n <= 0 {
		n = runtime.NumCPU()
	}
	return &Pool{threads: n}
}

// Threads is the number of workers.
func (p *Pool) Threads() int { return p.threads }

// For calls fn on disjoint ranges [lo, hi) covering [0, n), in parallel,
// and returns when all calls have. Ranges are at least grain long so that
// tiny loops stay on the caller's goroutine, and start at multiples of
// grain. They are a few per worker, taken from a shared counter by the
// caller and core/parallel's persistent workers, so rows of uneven cost and
// a worker descheduled on a busy host balance out.
func (p *Pool) For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	if p.threads <= 1 || n <= grain {
		fn(0, n)
		return
	}
	per := max(1, n/(grain*p.threads*chunksPerThread))
	parallel.For(n, per*grain, p.threads, fn)
}

// chunksPerThread is about how many ranges each thread takes.
const chunksPerThread = 4
