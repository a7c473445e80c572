package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
)

// queue admits up to parallel requests to the engine at a time (its
// slots) and lets at most max more wait; a waiter whose client leaves
// gives up its place at once.
// Once closed (shutdown), it admits no one: waiters and newcomers get 503.
type queue struct {
	slot   chan struct{}
	max    int
	closed chan struct{}

	mu       sync.Mutex
	isClosed bool
	waiting  int
	running  int
	rejected int64 // requests turned away with 429
}

func newQueue(maxWait, parallel int) *queue {
	return &queue{slot: make(chan struct{}, max(parallel, 1)), max: maxWait, closed: make(chan struct{})}
}

// close turns away every request that waits or comes; the running one
// goes on.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.isClosed {
		q.isClosed = true
		close(q.closed)
	}
}

// acquire waits for the engine. It returns a release function, or a 429
// when the queue is full, a 503 once it is closed, or ctx's error when the
// client leaves first.
func (q *queue) acquire(ctx context.Context, retryAfter int) (func(), error) {
	q.mu.Lock()
	if q.isClosed {
		q.mu.Unlock()
		return nil, errShuttingDown()
	}
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
		if q.isClosed { // closed while this select chose the slot
			q.mu.Unlock()
			<-q.slot
			return nil, errShuttingDown()
		}
		q.running++
		q.mu.Unlock()
		return q.release, nil
	case <-q.closed:
		q.mu.Lock()
		q.waiting--
		q.mu.Unlock()
		return nil, errShuttingDown()
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
