//go:build unix

package gguf

import (
	"fmt"
	"math"
	"os"

	"golang.org/x/sys/unix"
)

// mmapFile maps a whole file read-only and shared, so every process that
// maps the same shard shares its page-cache pages.
func mmapFile(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return []byte{}, nil
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("mmap: file of %d bytes is too large to map", size)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return b, nil
}

func munmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return nil
}
