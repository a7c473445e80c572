package ops

import (
	"runtime"
	"sync"
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
// tiny loops stay on the caller's goroutine.
func (p *Pool) For(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	chunks := min(p.threads, (n+grain-1)/grain)
	if chunks <= 1 {
		fn(0, n)
		return
	}
	// A few chunks per worker balance rows of uneven cost.
	chunks = min(chunks*4, (n+grain-1)/grain)
	size := (n + chunks - 1) / chunks
	var wg sync.WaitGroup
	next := make(chan int, chunks)
	for c := 0; c < chunks; c++ {
		next <- c
	}
	close(next)
	for w := 0; w < min(p.threads, chunks); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				lo := c * size
				fn(lo, min(lo+size, n))
			}
		}()
	}
	wg.Wait()
}
