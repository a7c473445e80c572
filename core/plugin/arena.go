package plugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// ArenaAlign is the alignment of every arena allocation: a cache line, and a
// multiple of every SIMD width kernels use.
const ArenaAlign = 64

// Arena is the shared memory the core and its plugins compute in:
// activations, KV cache, recurrent state. It is a file on a memory
// filesystem mapped by every process, so a plugin that dies loses nothing
// and the step can be re-issued. The core creates it and allocates from it;
// plugins map it by path and address it by ArenaRef.
type Arena struct {
	path  string
	f     *os.File
	mem   []byte
	owner bool

	mu   sync.Mutex
	free []ArenaRef // sorted by offset, coalesced
}

// CreateArena creates an arena of size bytes as a new file in dir
// (typically /dev/shm). The file is removed by Close.
func CreateArena(dir string, size int64) (*Arena, error) {
	if size <= 0 {
		return nil, fmt.Errorf("arena: size %d", size)
	}
	SweepShm(dir)
	f, err := os.CreateTemp(dir, shmPattern("arena"))
	if err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("arena: %s: %w", f.Name(), err)
	}
	a, err := mapArena(f, size, true)
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	a.free = []ArenaRef{{Offset: 0, Size: size}}
	return a, nil
}

// OpenArena maps an existing arena read-write, as a plugin does. It has no
// allocator: the core decides where things go.
func OpenArena(path string) (*Arena, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("arena: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("arena: %w", err)
	}
	a, err := mapArena(f, st.Size(), false)
	if err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

func mapArena(f *os.File, size int64, owner bool) (*Arena, error) {
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("arena: mmap %s: %w", f.Name(), err)
	}
	p, _ := filepath.Abs(f.Name())
	return &Arena{path: p, f: f, mem: mem, owner: owner}, nil
}

// Path is the file plugins open with OpenArena.
func (a *Arena) Path() string { return a.path }

// Size is the arena's size in bytes.
func (a *Arena) Size() int64 { return int64(len(a.mem)) }

// Bytes is the memory of r. It panics if r is outside the arena, which is a
// bug in the caller, not bad input.
func (a *Arena) Bytes(r ArenaRef) []byte { return a.mem[r.Offset : r.Offset+r.Size : r.Offset+r.Size] }

// Check reports whether r lies inside the arena; plugins check every ref
// they are sent before touching it.
func (a *Arena) Check(r ArenaRef) error {
	if r.Offset < 0 || r.Size < 0 || r.Offset+r.Size > int64(len(a.mem)) {
		return fmt.Errorf("arena: range [%d,+%d) outside %d bytes", r.Offset, r.Size, len(a.mem))
	}
	return nil
}

// ErrArenaFull is returned by Alloc when no free range is large enough.
var ErrArenaFull = errors.New("arena: full")

// Alloc reserves size bytes, aligned to ArenaAlign, first fit.
func (a *Arena) Alloc(size int64) (ArenaRef, error) {
	if !a.owner {
		return ArenaRef{}, errors.New("arena: Alloc on a plugin's view")
	}
	if size <= 0 {
		return ArenaRef{}, fmt.Errorf("arena: alloc %d bytes", size)
	}
	size = (size + ArenaAlign - 1) &^ (ArenaAlign - 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, f := range a.free {
		if f.Size < size {
			continue
		}
		r := ArenaRef{Offset: f.Offset, Size: size}
		if f.Size == size {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = ArenaRef{Offset: f.Offset + size, Size: f.Size - size}
		}
		return r, nil
	}
	return ArenaRef{}, fmt.Errorf("%w: no %d free bytes in a row", ErrArenaFull, size)
}

// Free returns r, as returned by Alloc, to the arena.
func (a *Arena) Free(r ArenaRef) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].Offset > r.Offset })
	a.free = append(a.free, ArenaRef{})
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

// Close unmaps the arena; the creator also removes its file.
func (a *Arena) Close() error {
	err := unix.Munmap(a.mem)
	a.mem = nil
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	if a.owner {
		if rerr := os.Remove(a.path); err == nil {
			err = rerr
		}
	}
	return err
}
