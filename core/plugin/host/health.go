package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by a supervisor's calls after its Close: a
// plugin stopped on purpose is never restarted.
var ErrClosed = errors.New("plugin closed")

// ErrDown is returned by a supervisor's calls while its plugin is down: it
// died and could not be restarted yet (the next attempt is under way or
// waiting for its backoff).
var ErrDown = errors.New("plugin down")

// The backoff between restart attempts of a plugin that will not come
// back: it doubles from the first to the last, so a lasting cause (a model
// file moved away) costs a process start every restartBackoffMax, and a
// cause that goes away is noticed within that time.
var (
	restartBackoffMin = 100 * time.Millisecond
	restartBackoffMax = 5 * time.Second
)

// watchEvery is how often a supervisor looks whether its plugin process
// exited between calls.
const watchEvery = 200 * time.Millisecond

// HealthState is where a supervised plugin stands.
type HealthState int

const (
	// Healthy: a process runs and takes calls.
	Healthy HealthState = iota
	// Restarting: the process died and a new one is being started.
	Restarting
	// Down: restarting failed; it is retried with backoff.
	Down
	// Closed: the supervisor was closed.
	Closed
)

func (s HealthState) String() string {
	switch s {
	case Healthy:
		return "ok"
	case Restarting:
		return "restarting"
	case Down:
		return "down"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("HealthState(%d)", int(s))
}

// Health is what a supervisor reports about its plugin, for a health
// probe and the log.
type Health struct {
	// Plugin is the Launch's name.
	Plugin string
	State  HealthState
	// Since is when the plugin entered State.
	Since time.Time
	// Reason is why it is not Healthy: the death that started a restart,
	// or the error of the last restart that failed. It may name files.
	Reason string
	// Restarts counts the restarts that succeeded.
	Restarts int
}

// Err is nil while the plugin is Healthy, otherwise an error that names
// the plugin, its state and since when, without Reason's details (they can
// name files; the supervisor logs them), so it can be shown to clients.
func (h Health) Err() error {
	if h.State == Healthy {
		return nil
	}
	return fmt.Errorf("plugin %s %s since %s", h.Plugin, h.State, h.Since.UTC().Format(time.RFC3339))
}

// BackendError is what a supervised plugin's call fails with. Its text is
// the full error, for the log (it may name files); PublicReason says only
// which backend failed, which core/server shows to clients.
type BackendError struct {
	Plugin string // the Launch's name
	Role   string // "staging" or "kernels"
	Err    error
}

func (e *BackendError) Error() string { return e.Err.Error() }
func (e *BackendError) Unwrap() error { return e.Err }

// PublicReason implements core/server's PublicReason.
func (e *BackendError) PublicReason() string {
	return fmt.Sprintf("the %s backend (plugin %s) failed", e.Role, e.Plugin)
}

// supervisor is what Supervisor and KernelsSupervisor share: a plugin
// process of type T, restarted when a call finds it dead or the watch sees
// it exit; a restart that fails is retried with backoff by the next calls
// and in the background until it succeeds or Close.
type supervisor[T any] struct {
	launch Launch
	role   string // "staging" or "kernels", for BackendError
	start  func(context.Context, Launch) (T, *Process, error)
	// prepare readies a started process before it takes calls (a stager's
	// re-open), with mu held; on an error the process is stopped.
	prepare func(context.Context, T) error

	mu      sync.RWMutex
	impl    T
	proc    *Process
	gen     int  // counts processes that came up
	down    bool // the last restart failed: no process runs
	pending bool // restarted in the background: the next call reports ErrRestarted
	retry   bool // the background retry loop runs
	closed  atomic.Bool
	stop    chan struct{} // closed by close

	hmu      sync.Mutex // health alone, so it answers while a restart holds mu
	health   Health
	failures int       // restart attempts failed in a row
	next     time.Time // while down, no attempt before this
}

func newSupervisor[T any](l Launch, role string, start func(context.Context, Launch) (T, *Process, error), impl T, p *Process) *supervisor[T] {
	s := &supervisor[T]{launch: l, role: role, start: start, impl: impl, proc: p, stop: make(chan struct{}),
		health: Health{Plugin: l.Name, State: Healthy, Since: time.Now()}}
	if p != nil {
		go s.watch()
	}
	return s
}

// watch restarts the plugin in the background as soon as its process
// exits between calls, so that Health tells the truth about a plugin that
// died while idle, and one that cannot come back is retried from then on.
// The next call reports ErrRestarted as if it had found the process dead.
func (s *supervisor[T]) watch() {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.RLock()
		p, gen, down := s.proc, s.gen, s.down
		s.mu.RUnlock()
		if !down && p.Exited() && !s.closed.Load() {
			s.revive(context.Background(), gen, true)
		}
	}
}

// Process is the current plugin process (nil in-process or while down).
func (s *supervisor[T]) Process() *Process {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.proc
}

// Generation numbers the process now running: it changes with every
// restart, so a caller that keeps what a process handed out (mapped
// regions) can tell that it must re-establish it, whichever call saw the
// ErrRestarted.
func (s *supervisor[T]) Generation() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// Restarts counts how often the plugin was restarted.
func (s *supervisor[T]) Restarts() int { return s.Health().Restarts }

// Health reports where the plugin stands. It does not wait for a restart
// under way.
func (s *supervisor[T]) Health() Health {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	return s.health
}

func (s *supervisor[T]) setHealth(st HealthState, reason string) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if s.health.State != st {
		s.health.Since = time.Now()
	}
	s.health.State, s.health.Reason = st, reason
}

// call runs fn on the current plugin. When the process turns out to be
// dead it restarts it and reports ErrRestarted: the caller re-establishes
// what the dead process held and re-issues the call. While the plugin is
// down, a call retries the restart once its backoff has passed, and
// otherwise fails at once with ErrDown.
func (s *supervisor[T]) call(ctx context.Context, fn func(T) error) (err error) {
	defer func() {
		if err != nil {
			err = &BackendError{Plugin: s.launch.Name, Role: s.role, Err: err}
		}
	}()
	if s.closed.Load() {
		return fmt.Errorf("plugin %s: %w", s.launch.Name, ErrClosed)
	}
	s.mu.RLock()
	impl, p, gen, down, pending := s.impl, s.proc, s.gen, s.down, s.pending
	s.mu.RUnlock()
	if pending && s.takePending() {
		return fmt.Errorf("plugin %s: %w in the background", s.launch.Name, ErrRestarted)
	}
	if down {
		if err := s.revive(ctx, gen, false); err != nil {
			return err
		}
		return fmt.Errorf("plugin %s: %w", s.launch.Name, ErrRestarted)
	}
	err = fn(impl)
	if err == nil || p == nil || !(errors.Is(err, ErrUnavailable) || p.Exited()) {
		return err
	}
	if s.closed.Load() {
		// Close stopped it under this call: no restart.
		return fmt.Errorf("plugin %s: %w (%v)", s.launch.Name, ErrClosed, err)
	}
	if rerr := s.revive(ctx, gen, false); rerr != nil {
		return fmt.Errorf("plugin %s died (%v) and did not restart: %w", s.launch.Name, err, rerr)
	}
	return fmt.Errorf("plugin %s: %w after: %v", s.launch.Name, ErrRestarted, err)
}

func (s *supervisor[T]) takePending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	took := s.pending
	s.pending = false
	return took
}

// revive replaces the dead process of generation gen, once however many
// callers saw it die. The first attempt runs at once; after a failure the
// next waits for the backoff and is made by whichever comes first, a call
// or the background loop. On success a background attempt leaves
// ErrRestarted pending for the next call.
func (s *supervisor[T]) revive(ctx context.Context, gen int, background bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return fmt.Errorf("plugin %s: %w", s.launch.Name, ErrClosed)
	}
	if s.gen != gen {
		// Another caller brought it back; this one reports ErrRestarted
		// itself, so none is pending any more.
		s.pending = s.pending && background
		return nil
	}
	log := s.launch.logger().With("plugin", s.launch.Name)
	if s.down {
		s.hmu.Lock()
		wait, h := time.Until(s.next), s.health
		s.hmu.Unlock()
		if wait > 0 {
			return fmt.Errorf("plugin %s: %w since %s (next restart in %v): %s", s.launch.Name, ErrDown,
				h.Since.UTC().Format(time.RFC3339), wait.Round(time.Millisecond), h.Reason)
		}
		// Health stays Down, since the first failure, through the retries.
	} else {
		log.Warn("plugin died; restarting", "pid", s.proc.Pid())
		s.setHealth(Restarting, "the plugin process exited")
	}
	s.proc.Kill()
	impl, p, err := s.start(ctx, s.launch)
	if err == nil && s.prepare != nil {
		if err = s.prepare(ctx, impl); err != nil {
			p.Kill()
		}
	}
	if err == nil && s.closed.Load() {
		p.Kill()
		return fmt.Errorf("plugin %s: %w", s.launch.Name, ErrClosed)
	}
	if err != nil {
		var zero T
		s.impl, s.proc, s.down = zero, nil, true
		d := s.failed(err)
		log.Warn("plugin restart failed; retrying", "retry_in", d, "err", err)
		if !s.retry {
			s.retry = true
			go s.retryLoop(gen)
		}
		return fmt.Errorf("%w: %v", ErrDown, err)
	}
	if s.down {
		log.Info("plugin restarted", "pid", p.Pid())
	}
	s.impl, s.proc, s.down = impl, p, false
	s.gen++
	s.pending = background
	s.hmu.Lock()
	s.failures = 0
	s.health.Restarts++
	s.hmu.Unlock()
	s.setHealth(Healthy, "")
	return nil
}

// failed records a failed restart and returns the wait before the next.
func (s *supervisor[T]) failed(err error) time.Duration {
	s.hmu.Lock()
	d := restartBackoffMin << min(s.failures, 16)
	d = min(d, restartBackoffMax)
	s.failures++
	s.next = time.Now().Add(d)
	s.hmu.Unlock()
	s.setHealth(Down, err.Error())
	return d
}

// retryLoop retries the restart of generation gen in the background until
// one succeeds (here or in a call) or the supervisor closes.
func (s *supervisor[T]) retryLoop(gen int) {
	for {
		s.hmu.Lock()
		wait := time.Until(s.next)
		s.hmu.Unlock()
		t := time.NewTimer(max(wait, 0))
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		s.mu.Lock()
		if !s.down || s.gen != gen || s.closed.Load() {
			s.retry = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.revive(context.Background(), gen, true)
	}
}

// close marks the supervisor closed, so that nothing restarts the plugin
// any more, waits for a restart under way, runs fn on a live plugin and
// stops its process.
func (s *supervisor[T]) close(fn func(T) error) error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if !s.down && fn != nil {
		err = fn(s.impl)
	}
	s.proc.Kill()
	s.setHealth(Closed, "")
	return err
}
