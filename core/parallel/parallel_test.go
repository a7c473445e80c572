package parallel

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// check runs For and verifies that every index is covered exactly once by
// ranges that start at multiples of chunk.
func check(t *testing.T, n, chunk, threads int) {
	t.Helper()
	hits := make([]atomic.Int32, max(n, 0))
	var bad atomic.Int32
	For(n, chunk, threads, func(lo, hi int) {
		if lo < 0 || hi > n || lo >= hi || lo%max(chunk, 1) != 0 || (hi-lo != max(chunk, 1) && hi != n) {
			bad.Add(1)
			return
		}
		for i := lo; i < hi; i++ {
			hits[i].Add(1)
		}
	})
	if bad.Load() != 0 {
		t.Fatalf("n=%d chunk=%d threads=%d: %d bad ranges", n, chunk, threads, bad.Load())
	}
	for i := range hits {
		if h := hits[i].Load(); h != 1 {
			t.Fatalf("n=%d chunk=%d threads=%d: index %d run %d times", n, chunk, threads, i, h)
		}
	}
}

func TestForCovers(t *testing.T) {
	for _, n := range []int{0, 1, 2, 15, 16, 17, 100, 1000, 4097} {
		for _, chunk := range []int{0, 1, 3, 16, 64, 5000} {
			for _, threads := range []int{0, 1, 2, 3, 8} {
				check(t, n, chunk, threads)
			}
		}
	}
}

// Loops that follow each other closely, from several goroutines at once,
// some nested: every loop still covers its range once and nothing hangs.
func TestForConcurrentNested(t *testing.T) {
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				var total atomic.Int64
				For(64, 4, 3, func(lo, hi int) {
					For(hi-lo, 1, 2, func(a, b int) { total.Add(int64(b - a)) })
				})
				if total.Load() != 64 {
					t.Errorf("nested loop covered %d of 64", total.Load())
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A worker that parked must wake for the next loop, and one that was
// handed a loop it never started must come back for later ones.
func TestForAfterPark(t *testing.T) {
	for i := 0; i < 50; i++ {
		check(t, 1000, 10, 3)
		if i%10 == 0 {
			time.Sleep(time.Millisecond)
		}
		check(t, 2, 1, 2) // tiny: the caller often finishes before its helper wakes
	}
}

// A helper joins a loop whose ranges take a while.
func TestForUsesHelpers(t *testing.T) {
	var now, most atomic.Int32
	For(8, 1, 2, func(lo, hi int) {
		c := now.Add(1)
		for m := most.Load(); c > m && !most.CompareAndSwap(m, c); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		now.Add(-1)
	})
	if most.Load() < 2 {
		buf := make([]byte, 1<<16)
		t.Errorf("at most %d ranges ran at once on 2 threads\n%s", most.Load(), buf[:runtime.Stack(buf, true)])
	}
}

func TestForNoAlloc(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	out := make([]float32, 4096)
	fn := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] += 1
		}
	}
	For(len(out), 16, 2, fn) // start the worker, fill the job pool
	if a := testing.AllocsPerRun(200, func() { For(len(out), 16, 2, fn) }); a > 0.1 {
		t.Errorf("%.2f allocations per loop", a)
	}
}

func BenchmarkForEmpty(b *testing.B) {
	fn := func(lo, hi int) {}
	for _, threads := range []int{1, 2} {
		b.Run(map[int]string{1: "t1", 2: "t2"}[threads], func(b *testing.B) {
			for b.Loop() {
				For(256, 16, threads, fn)
			}
		})
	}
}
