package plugin

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Arena is the shared memory the core and its plugins compute in:
// activations, KV cache, recurrent state. It is a file on a memory
// filesystem mapped by every process, so a plugin that dies loses nothing
// and the step can be re-issued. The host creates it and allocates from it
// (core/plugin/host's Arena); a plugin maps it by path with OpenArena and
// addresses it by ArenaRef.
type Arena struct {
	path string
	f    *os.File
	mem  []byte
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
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("arena: mmap %s: %w", f.Name(), err)
	}
	p, _ := filepath.Abs(f.Name())
	return &Arena{path: p, f: f, mem: mem}, nil
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

// Close unmaps the arena.
func (a *Arena) Close() error {
	err := unix.Munmap(a.mem)
	a.mem = nil
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	return err
}
