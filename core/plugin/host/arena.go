package host

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/internal/wire"
)

// ArenaAlign is the alignment of every arena allocation: a cache line, and a
// multiple of every SIMD width kernels use.
const ArenaAlign = 64

// Arena is the host's arena: the shared memory plugins map with
// plugin.OpenArena (Path), with the allocator the host places activations,
// scratch and state with. The host creates it; its file is removed by
// Close.
type Arena struct {
	*plugin.Arena

	mu   sync.Mutex
	free []plugin.ArenaRef // sorted by offset, coalesced
}

// CreateArena creates an arena of size bytes as a new file in dir
// (typically /dev/shm). The file is removed by Close.
func CreateArena(dir string, size int64) (*Arena, error) {
	if size <= 0 {
		return nil, fmt.Errorf("arena: size %d", size)
	}
	wire.SweepShm(dir)
	f, err := os.CreateTemp(dir, wire.ShmPattern("arena"))
	if err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("arena: %s: %w", f.Name(), err)
	}
	m, err := plugin.OpenArena(f.Name())
	if err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	return &Arena{Arena: m, free: []plugin.ArenaRef{{Offset: 0, Size: size}}}, nil
}

// ErrArenaFull is returned by Alloc when no free range is large enough.
var ErrArenaFull = errors.New("arena: full")

// Alloc reserves size bytes, aligned to ArenaAlign, first fit.
func (a *Arena) Alloc(size int64) (plugin.ArenaRef, error) {
	if size <= 0 {
		return plugin.ArenaRef{}, fmt.Errorf("arena: alloc %d bytes", size)
	}
	size = (size + ArenaAlign - 1) &^ (ArenaAlign - 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, f := range a.free {
		if f.Size < size {
			continue
		}
		r := plugin.ArenaRef{Offset: f.Offset, Size: size}
		if f.Size == size {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = plugin.ArenaRef{Offset: f.Offset + size, Size: f.Size - size}
		}
		return r, nil
	}
	return plugin.ArenaRef{}, fmt.Errorf("%w: no %d free bytes in a row", ErrArenaFull, size)
}

// Free returns r, as returned by Alloc, to the arena.
func (a *Arena) Free(r plugin.ArenaRef) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].Offset > r.Offset })
	a.free = append(a.free, plugin.ArenaRef{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = r
	// Coalesce with the following, then the preceding neighbour.
	if i+1 < len(a.free) && a.free[i].Offset+a.free[i].Size == a.free[i+1].Offset {
		a.free[i].Size += a.free[i+1].Size
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].Offset+a.free[i-1].Size == a.free[i].Offset {
		a.free[i-1].Size += a.free[i].Size
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}

// FreeBytes is the total of the free ranges.
func (a *Arena) FreeBytes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n int64
	for _, f := range a.free {
		n += f.Size
	}
	return n
}

// Close unmaps the arena and removes its file.
func (a *Arena) Close() error {
	err := a.Arena.Close()
	if rerr := os.Remove(a.Path()); err == nil {
		err = rerr
	}
	return err
}
