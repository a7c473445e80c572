package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// Shutdown drains in this order, so that the caller may stop the engine and
// its plugins as soon as Serve returns:
//
//  1. New requests are refused: the listener closes, idle keep-alive
//     connections close, and requests that still arrive on open
//     connections and those waiting for the engine get 503 "the server is
//     shutting down" (http.Server.Shutdown would drop the former without
//     a word, so Serve does not use it). Every response from then on
//     closes its connection.
//  2. Running requests go on for the grace period (Options.ShutdownGrace).
//  3. Then their generations are cancelled and each ends well-formed: a
//     stream with a last chunk whose finish_reason is "stop" and which
//     carries an "error" object saying the generation was cut short, then
//     the usage chunk if asked for and "data: [DONE]"; a whole response
//     with a 503 error body.
//  4. Serve returns once no handler runs, so nothing calls the backend
//     any more.
//
// finish_reason "stop" because OpenAI's set of reasons has none for "the
// server stopped" and typed clients reject values outside it; "length"
// would claim the token limit was reached. The error object beside it is
// what llama-server sends for a stream that fails after it started, so
// clients that check for it (the OpenAI SDKs raise on it) learn that the
// text is incomplete.

// errInterrupted is run's error for a generation the end of the shutdown
// grace period cut short.
var errInterrupted = errors.New("server: generation cut short by shutdown")

// errShuttingDown answers requests that arrive, or still wait for the
// engine, once shutdown has begun.
func errShuttingDown() *apiError { return errUnavailable("the server is shutting down") }

// errCutShort tells a client that its generation was ended by shutdown.
func errCutShort() *apiError {
	return errUnavailable("the server is shutting down: the generation was stopped before it finished")
}

// cutShort is err as a client should hear it when shutdown ended the
// generation, else err unchanged.
func cutShort(err error) error {
	if errors.Is(err, errInterrupted) {
		return errCutShort()
	}
	return err
}

// streamError is what a stream that already started tells its client
// about err: nil when the client is gone, the shutdown's words when
// shutdown ended the generation, else the public form of err.
func (s *Server) streamError(c echo.Context, err error) *apiError {
	switch {
	case errors.Is(err, errClientGone):
		return nil
	case errors.Is(err, errInterrupted):
		return errCutShort()
	}
	return s.publicError(c, err)
}

// flushBound bounds how long Serve waits, once no handler runs, for
// connections still inside a request: a response being flushed (that takes
// microseconds) or a client sending a request too slowly to matter.
const flushBound = time.Second

// EndGrace ends the shutdown grace period now (k3 serve calls it on a
// second Ctrl-C): running generations end as they would at its end. Call it
// once Serve's context is done.
func (s *Server) EndGrace() { s.endGrace() }

// generationContext is ctx, cancelled as well when the shutdown grace
// period ends; stop releases it.
func (s *Server) generationContext(ctx context.Context) (gctx context.Context, stop func()) {
	gctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(s.graceOver, func() { cancel(errInterrupted) })
	return gctx, func() { unhook(); cancel(nil) }
}

// interrupted reports whether gctx (from generationContext) was ended by
// shutdown rather than by its client.
func interrupted(gctx context.Context) bool {
	return errors.Is(context.Cause(gctx), errInterrupted)
}

// shutdown drains hs, which serves ln (see above). It returns when no
// handler runs.
func (s *Server) shutdown(hs *http.Server, ln net.Listener) {
	start := time.Now()
	s.stopping.Store(true)
	s.queue.close()
	_ = ln.Close()
	hs.SetKeepAlivesEnabled(false) // also closes the idle connections
	running, _ := s.queue.counts()
	grace := max(s.opts.ShutdownGrace, 0)
	s.log.Info("shutting down", "running", running, "grace", grace.String())

	timer := time.NewTimer(grace)
	defer timer.Stop()
	if !s.flight.wait(s.flight.noHandlers, timer.C) {
		running, _ := s.queue.counts()
		s.log.Warn("shutdown grace period over: ending the running requests", "running", running)
		s.endGrace()
		s.flight.wait(s.flight.noHandlers, nil)
	}
	flush := time.NewTimer(flushBound)
	defer flush.Stop()
	s.flight.wait(s.flight.noActiveConns, flush.C)
	_ = hs.Close()
	s.log.Info("server stopped", "seconds", time.Since(start).Seconds())
}

// inflight counts what still runs: handlers, and connections between the
// first byte of a request and the last of its response (http.ConnState).
type inflight struct {
	mu       sync.Mutex
	handlers int
	active   map[net.Conn]bool
	changed  chan struct{} // closed and replaced whenever a count drops
}

func newInflight() *inflight {
	return &inflight{active: map[net.Conn]bool{}, changed: make(chan struct{})}
}

func (f *inflight) signal() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// track counts h's calls.
func (f *inflight) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.handlers++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			f.handlers--
			f.signal()
			f.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}

// connState is the http.Server's ConnState hook.
func (f *inflight) connState(c net.Conn, st http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st == http.StateActive {
		f.active[c] = true
		return
	}
	if f.active[c] {
		delete(f.active, c)
		f.signal()
	}
}

// noHandlers and noActiveConns are conditions for wait, called with f.mu held.
func (f *inflight) noHandlers() bool    { return f.handlers == 0 }
func (f *inflight) noActiveConns() bool { return len(f.active) == 0 }

// wait returns true once done holds, false if timeout fires first (a nil
// timeout never does).
func (f *inflight) wait(done func() bool, timeout <-chan time.Time) bool {
	for {
		f.mu.Lock()
		ok, ch := done(), f.changed
		f.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-timeout:
			return false
		}
	}
}
