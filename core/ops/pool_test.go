package ops

import (
	"sync/atomic"
	"testing"
)

// For covers [0, n) once, in ranges at least grain long (but the last) that
// start at multiples of grain, for any pool size.
func TestPoolFor(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := NewPool(threads)
		for _, n := range []int{0, 1, 5, 16, 17, 64, 1000, 4096} {
			for _, grain := range []int{0, 1, 4, 16, 100} {
				hits := make([]atomic.Int32, n)
				g := max(grain, 1)
				p.For(n, grain, func(lo, hi int) {
					if lo%g != 0 || hi > n || lo >= hi || (hi-lo < g && hi != n) {
						t.Errorf("threads=%d n=%d grain=%d: range [%d, %d)", threads, n, grain, lo, hi)
					}
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
				})
				for i := range hits {
					if h := hits[i].Load(); h != 1 {
						t.Fatalf("threads=%d n=%d grain=%d: index %d run %d times", threads, n, grain, i, h)
					}
				}
			}
		}
	}
}

// A zero Pool runs loops on the caller.
func TestPoolForZero(t *testing.T) {
	var p Pool
	calls := 0
	p.For(100, 1, func(lo, hi int) {
		if lo != 0 || hi != 100 {
			t.Errorf("range [%d, %d)", lo, hi)
		}
		calls++
	})
	if calls != 1 {
		t.Errorf("%d calls", calls)
	}
}
