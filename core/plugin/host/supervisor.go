package host

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/internal/wire"
)

// ErrRestarted is returned by a Supervisor's call when the plugin died
// under it (or was down) and a new process now runs, re-opened with the same
// request. Nothing the dead process held is valid any more: the caller
// re-maps Regions() and re-issues the step, whose state lives in the arena
// and in files, not in the plugin.
var ErrRestarted = errors.New("plugin restarted")

// Supervisor runs a stager subprocess, restarts it when it dies and
// re-opens it with the same request; a restart that fails (the model file
// is gone for a while) is retried with backoff until it succeeds, so the
// caller recovers by itself once the cause is gone. It is itself a Stager.
// It also owns the stager's shared-memory directory, so the files of a
// killed plugin do not outlive it.
type Supervisor struct {
	*supervisor[plugin.Stager]

	// Under supervisor.mu.
	req  *plugin.OpenRequest
	resp *plugin.OpenResponse
	// shmRoot is the directory the Supervisor made (empty when the request
	// named one); each process opens in a directory of its own below it,
	// shmDir, so the files of a dead one stay until the caller no longer
	// maps them (ReleaseStale): stale.
	shmRoot, shmDir string
	stale           []string
}

// SuperviseStager starts the stager l names under supervision.
func SuperviseStager(ctx context.Context, l Launch) (*Supervisor, error) {
	st, p, err := StartStager(ctx, l)
	if err != nil {
		return nil, err
	}
	s := &Supervisor{supervisor: newSupervisor(l, "staging", StartStager, st, p)}
	s.prepare = s.reopen
	return s, nil
}

// Regions are the regions of the current plugin process, valid until the
// next ErrRestarted.
func (s *Supervisor) Regions() []plugin.Region {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.resp == nil {
		return nil
	}
	return s.resp.Regions
}

// Open opens the stager and remembers req for restarts. An empty ShmDir is
// replaced by a fresh directory under /dev/shm that the Supervisor removes.
func (s *Supervisor) Open(ctx context.Context, req *plugin.OpenRequest) (*plugin.OpenResponse, error) {
	r := *req
	if r.ShmDir == "" {
		wire.SweepShm(wire.ShmDir())
		dir, err := os.MkdirTemp(wire.ShmDir(), wire.ShmPattern("stager"))
		if err != nil {
			return nil, fmt.Errorf("plugin %s: shm dir: %w", s.launch.Name, err)
		}
		s.mu.Lock()
		s.shmRoot = dir
		s.mu.Unlock()
	}
	var resp *plugin.OpenResponse
	var dir string
	err := s.call(ctx, func(st plugin.Stager) (err error) {
		resp, dir, err = s.open(ctx, st, &r)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.req = &r
	s.retire(dir, resp)
	s.mu.Unlock()
	return resp, nil
}

// open opens st with r, in a directory of its own when the Supervisor owns
// the shared memory; a failed open leaves no files.
func (s *Supervisor) open(ctx context.Context, st plugin.Stager, r *plugin.OpenRequest) (*plugin.OpenResponse, string, error) {
	if s.shmRoot == "" {
		resp, err := st.Open(ctx, r)
		return resp, "", err
	}
	dir, err := os.MkdirTemp(s.shmRoot, "p*")
	if err != nil {
		return nil, "", fmt.Errorf("plugin %s: shm dir: %w", s.launch.Name, err)
	}
	ro := *r
	ro.ShmDir = dir
	resp, err := st.Open(ctx, &ro)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	return resp, dir, nil
}

// reopen opens a restarted process with the remembered request; mu held.
func (s *Supervisor) reopen(ctx context.Context, st plugin.Stager) error {
	if s.req == nil {
		return nil
	}
	resp, dir, err := s.open(ctx, st, s.req)
	if err != nil {
		return fmt.Errorf("re-open: %w", err)
	}
	s.retire(dir, resp)
	return nil
}

// retire makes dir and resp the current process's; the previous process's
// directory turns stale, and one older than that goes (its regions were
// re-mapped at the restart between). mu held.
func (s *Supervisor) retire(dir string, resp *plugin.OpenResponse) {
	for _, d := range s.stale {
		os.RemoveAll(d)
	}
	s.stale = nil
	if s.shmDir != "" {
		s.stale = []string{s.shmDir}
	}
	s.shmDir, s.resp = dir, resp
}

// ReleaseStale removes the shared-memory files of processes that died
// before the current one. The caller calls it once it has re-mapped the
// current Regions() after an ErrRestarted: until then the dead process's
// files stay, so whatever still reads them by path (a kernels plugin given
// the old regions) finds the bytes it expects.
func (s *Supervisor) ReleaseStale() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.stale {
		os.RemoveAll(d)
	}
	s.stale = nil
}

func (s *Supervisor) Describe(ctx context.Context) (*plugin.StagerInfo, error) {
	var info *plugin.StagerInfo
	err := s.call(ctx, func(st plugin.Stager) (err error) {
		info, err = st.Describe(ctx)
		return err
	})
	return info, err
}

func (s *Supervisor) Hint(ctx context.Context, req *plugin.HintRequest) error {
	return s.call(ctx, func(st plugin.Stager) error { return st.Hint(ctx, req) })
}

func (s *Supervisor) Acquire(ctx context.Context, req *plugin.AcquireRequest) (*plugin.AcquireResponse, error) {
	var resp *plugin.AcquireResponse
	err := s.call(ctx, func(st plugin.Stager) (err error) {
		resp, err = st.Acquire(ctx, req)
		return err
	})
	return resp, err
}

func (s *Supervisor) Release(ctx context.Context, req *plugin.ReleaseRequest) error {
	return s.call(ctx, func(st plugin.Stager) error { return st.Release(ctx, req) })
}

func (s *Supervisor) Stats(ctx context.Context) (*plugin.Stats, error) {
	var resp *plugin.Stats
	err := s.call(ctx, func(st plugin.Stager) (err error) {
		resp, err = st.Stats(ctx)
		return err
	})
	return resp, err
}

// Close closes the stager, stops its process and removes its shm files. No
// call restarts the plugin afterwards; they return ErrClosed.
func (s *Supervisor) Close(ctx context.Context) error {
	err := s.close(func(st plugin.Stager) error { return st.Close(ctx) })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shmRoot != "" {
		if rerr := os.RemoveAll(s.shmRoot); err == nil {
			err = rerr
		}
	}
	return err
}

// KernelsSupervisor runs a kernels subprocess and restarts it when it
// dies, retrying a restart that fails as Supervisor does. Kernels keep no
// state between batches (their inputs and outputs live in the arena, each
// batch names its regions), so after ErrRestarted the caller re-issues the
// batch as it was.
type KernelsSupervisor struct {
	*supervisor[plugin.Kernels]
}

// SuperviseKernels starts the kernels l names under supervision.
func SuperviseKernels(ctx context.Context, l Launch) (*KernelsSupervisor, error) {
	k, p, err := StartKernels(ctx, l)
	if err != nil {
		return nil, err
	}
	return &KernelsSupervisor{newSupervisor(l, "kernels", StartKernels, k, p)}, nil
}

func (s *KernelsSupervisor) Describe(ctx context.Context) (*plugin.KernelsInfo, error) {
	var info *plugin.KernelsInfo
	err := s.call(ctx, func(k plugin.Kernels) (err error) {
		info, err = k.Describe(ctx)
		return err
	})
	return info, err
}

func (s *KernelsSupervisor) Execute(ctx context.Context, req *plugin.ExecuteRequest) (*plugin.ExecuteResponse, error) {
	var resp *plugin.ExecuteResponse
	err := s.call(ctx, func(k plugin.Kernels) (err error) {
		resp, err = k.Execute(ctx, req)
		return err
	})
	return resp, err
}

// Close stops the plugin process; no call restarts it afterwards.
func (s *KernelsSupervisor) Close() {
	s.close(nil)
}
