package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
)

// ErrRestarted is returned by a Supervisor's call when the plugin died
// under it and was restarted and re-opened. Nothing the dead process held is
// valid any more: the caller re-maps Regions() and re-issues the step, whose
// state lives in the arena and in files, not in the plugin.
var ErrRestarted = errors.New("plugin restarted")

// Supervisor runs a stager subprocess, restarts it when it dies and
// re-opens it with the same request. It is itself a Stager. It also owns
// the stager's shared-memory directory, so the files of a killed plugin do
// not outlive it.
type Supervisor struct {
	launch Launch

	mu       sync.RWMutex
	stager   Stager
	proc     *Process
	gen      int // incremented by each restart
	req      *OpenRequest
	resp     *OpenResponse
	shmDir   string
	restarts int
}

// SuperviseStager starts the stager l names under supervision.
func SuperviseStager(ctx context.Context, l Launch) (*Supervisor, error) {
	s, p, err := StartStager(ctx, l)
	if err != nil {
		return nil, err
	}
	return &Supervisor{launch: l, stager: s, proc: p}, nil
}

// Process is the current plugin process (nil in-process).
func (s *Supervisor) Process() *Process {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.proc
}

// Restarts counts how often the plugin was restarted.
func (s *Supervisor) Restarts() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.restarts
}

// Regions are the regions of the current plugin process, valid until the
// next ErrRestarted.
func (s *Supervisor) Regions() []Region {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.resp == nil {
		return nil
	}
	return s.resp.Regions
}

// Open opens the stager and remembers req for restarts. An empty ShmDir is
// replaced by a fresh directory under /dev/shm that the Supervisor removes.
func (s *Supervisor) Open(ctx context.Context, req *OpenRequest) (*OpenResponse, error) {
	r := *req
	if r.ShmDir == "" {
		SweepShm(ShmDir())
		dir, err := os.MkdirTemp(ShmDir(), shmPattern("stager"))
		if err != nil {
			return nil, fmt.Errorf("plugin %s: shm dir: %w", s.launch.Name, err)
		}
		r.ShmDir = dir
		s.mu.Lock()
		s.shmDir = dir
		s.mu.Unlock()
	}
	var resp *OpenResponse
	err := s.call(ctx, func(st Stager) (err error) {
		resp, err = st.Open(ctx, &r)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.req, s.resp = &r, resp
	s.mu.Unlock()
	return resp, nil
}

func (s *Supervisor) Hint(ctx context.Context, req *HintRequest) error {
	return s.call(ctx, func(st Stager) error { return st.Hint(ctx, req) })
}

func (s *Supervisor) Acquire(ctx context.Context, req *AcquireRequest) (*AcquireResponse, error) {
	var resp *AcquireResponse
	err := s.call(ctx, func(st Stager) (err error) {
		resp, err = st.Acquire(ctx, req)
		return err
	})
	return resp, err
}

func (s *Supervisor) Release(ctx context.Context, req *ReleaseRequest) error {
	return s.call(ctx, func(st Stager) error { return st.Release(ctx, req) })
}

func (s *Supervisor) Stats(ctx context.Context) (*Stats, error) {
	var resp *Stats
	err := s.call(ctx, func(st Stager) (err error) {
		resp, err = st.Stats(ctx)
		return err
	})
	return resp, err
}

// Close closes the stager, stops its process and removes its shm files.
func (s *Supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.stager.Close(ctx)
	s.proc.Kill()
	if s.shmDir != "" {
		if rerr := os.RemoveAll(s.shmDir); err == nil {
			err = rerr
		}
	}
	return err
}

// call runs fn on the current stager; if the process turns out to be dead,
// it restarts it once and reports ErrRestarted.
func (s *Supervisor) call(ctx context.Context, fn func(Stager) error) error {
	s.mu.RLock()
	st, p, gen := s.stager, s.proc, s.gen
	s.mu.RUnlock()
	err := fn(st)
	if err == nil || p == nil || !(errors.Is(err, ErrUnavailable) || p.Exited()) {
		return err
	}
	if rerr := s.restart(ctx, gen); rerr != nil {
		return fmt.Errorf("plugin %s died (%v) and did not restart: %w", s.launch.Name, err, rerr)
	}
	return fmt.Errorf("plugin %s: %w after: %v", s.launch.Name, ErrRestarted, err)
}

// restart replaces the process of generation gen; concurrent callers that
// saw the same dead process restart it only once.
func (s *Supervisor) restart(ctx context.Context, gen int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen != gen {
		return nil
	}
	s.launch.logger().Warn("plugin died; restarting", "plugin", s.launch.Name, "pid", s.proc.Pid())
	s.proc.Kill()
	st, p, err := StartStager(ctx, s.launch)
	if err != nil {
		return err
	}
	s.stager, s.proc = st, p
	s.gen++
	s.restarts++
	if s.req == nil {
		return nil
	}
	// The dead process's slot files are garbage; give the new one a clean
	// directory.
	if s.shmDir != "" {
		os.RemoveAll(s.shmDir)
		if err := os.MkdirAll(s.shmDir, 0o700); err != nil {
			return err
		}
	}
	resp, err := st.Open(ctx, s.req)
	if err != nil {
		return fmt.Errorf("re-open: %w", err)
	}
	s.resp = resp
	return nil
}

// KernelsSupervisor runs a kernels subprocess and restarts it when it
// dies. Kernels keep no state between batches (their inputs and outputs
// live in the arena), so after ErrRestarted the caller re-issues the batch
// as it was.
type KernelsSupervisor struct {
	launch Launch

	mu       sync.RWMutex
	kernels  Kernels
	proc     *Process
	gen      int
	restarts int
}

// SuperviseKernels starts the kernels l names under supervision.
func SuperviseKernels(ctx context.Context, l Launch) (*KernelsSupervisor, error) {
	k, p, err := StartKernels(ctx, l)
	if err != nil {
		return nil, err
	}
	return &KernelsSupervisor{launch: l, kernels: k, proc: p}, nil
}

// Process is the current plugin process (nil in-process).
func (s *KernelsSupervisor) Process() *Process {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.proc
}

// Restarts counts how often the plugin was restarted.
func (s *KernelsSupervisor) Restarts() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.restarts
}

func (s *KernelsSupervisor) Describe(ctx context.Context) (*KernelsInfo, error) {
	var info *KernelsInfo
	err := s.call(ctx, func(k Kernels) (err error) {
		info, err = k.Describe(ctx)
		return err
	})
	return info, err
}

func (s *KernelsSupervisor) Execute(ctx context.Context, req *ExecuteRequest) (*ExecuteResponse, error) {
	var resp *ExecuteResponse
	err := s.call(ctx, func(k Kernels) (err error) {
		resp, err = k.Execute(ctx, req)
		return err
	})
	return resp, err
}

// Close stops the plugin process.
func (s *KernelsSupervisor) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc.Kill()
}

func (s *KernelsSupervisor) call(ctx context.Context, fn func(Kernels) error) error {
	s.mu.RLock()
	k, p, gen := s.kernels, s.proc, s.gen
	s.mu.RUnlock()
	err := fn(k)
	if err == nil || p == nil || !(errors.Is(err, ErrUnavailable) || p.Exited()) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gen == gen {
		s.launch.logger().Warn("plugin died; restarting", "plugin", s.launch.Name, "pid", s.proc.Pid())
		s.proc.Kill()
		nk, np, rerr := StartKernels(ctx, s.launch)
		if rerr != nil {
			return fmt.Errorf("plugin %s died (%v) and did not restart: %w", s.launch.Name, err, rerr)
		}
		s.kernels, s.proc = nk, np
		s.gen++
		s.restarts++
	}
	return fmt.Errorf("plugin %s: %w after: %v", s.launch.Name, ErrRestarted, err)
}
