package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
)

// queue admits one request to the engine at a time and lets at most max
// more wait; a waiter whose client leaves gives up its place at once.
type queue struct {
	slot chan struct{}
	max  int

	mu       sync.Mutex
	waiting  int
	running  int
	rejected int64 // requests turned away with 429
}

func newQueue(max int) *queue {
	return &queue{slot: make(chan struct{}, 1), max: max}
}

// acquire waits for the engine. It returns a release function, or a 429
// when the queue is full, or ctx's error when the client leaves first.
func (q *queue) acquire(ctx context.Context, retryAfter int) (func(), error) {
	q.mu.Lock()
	select {
	case q.slot <- struct{}{}:
		q.running++
		q.mu.Unlock()
		return q.release, nil
	default:
	}
	if q.waiting >= q.max {
		q.rejected++
		q.mu.Unlock()
		e := newAPIError(http.StatusTooManyRequests, "rate_limit_error",
			fmt.Sprintf("server busy: %d requests already waiting for the engine", q.max))
		e.RetryAfter = max(retryAfter, 1)
		return nil, e
	}
	q.waiting++
	q.mu.Unlock()

	select {
	case q.slot <- struct{}{}:
		q.mu.Lock()
		q.waiting--
		q.running++
		q.mu.Unlock()
		return q.release, nil
	case <-ctx.Done():
		q.mu.Lock()
		q.waiting--
		q.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (q *queue) release() {
	q.mu.Lock()
	q.running--
	q.mu.Unlock()
	<-q.slot
}

// counts returns the requests running and waiting.
func (q *queue) counts() (running, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running, q.waiting
}

func (q *queue) rejections() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rejected
}
