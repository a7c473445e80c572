package stagingpread

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// align is the O_DIRECT alignment of file offsets, lengths and memory: 4
// KiB covers both 512-byte and 4-KiB logical blocks.
const align = 4096

func alignDown(n int64) int64 { return n &^ (align - 1) }
func alignUp(n int64) int64   { return (n + align - 1) &^ (align - 1) }

// Seams for tests: a filesystem that refuses O_DIRECT at open or at read
// is simulated by replacing these.
var (
	openDirect = func(path string) (*os.File, error) {
		return os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	}
	pread = func(f *os.File, p []byte, off int64) (int, error) {
		return unix.Pread(int(f.Fd()), p, off)
	}
)

// reader reads aligned ranges of the shards, with O_DIRECT while the
// filesystem allows it and buffered reads after it refuses.
type reader struct {
	buffered []*os.File
	direct   []*os.File // nil when O_DIRECT is off
	useDir   atomic.Bool
	fallback sync.Once
	why      atomic.Pointer[string] // why direct I/O is off, for the mode line
}

func (r *reader) setWhy(s string) { r.why.Store(&s) }

// whyBuffered says why reads are buffered ("" with O_DIRECT on).
func (r *reader) whyBuffered() string {
	if p := r.why.Load(); p != nil && !r.useDir.Load() {
		return *p
	}
	return ""
}

// openReader opens every shard. mode is "auto", "on" or "off"; with "on" a
// filesystem that refuses O_DIRECT is an error.
func openReader(paths []string, mode string) (*reader, error) {
	r := &reader{}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			r.close()
			return nil, fmt.Errorf("shard: %w", err)
		}
		r.buffered = append(r.buffered, f)
	}
	if mode == "off" {
		r.setWhy("off by option")
		return r, nil
	}
	for _, p := range paths {
		f, err := openDirect(p)
		if err != nil {
			for _, d := range r.direct {
				d.Close()
			}
			r.direct = nil
			if mode == "on" || !errors.Is(err, syscall.EINVAL) {
				r.close()
				return nil, fmt.Errorf("shard %s: O_DIRECT open: %w", p, err)
			}
			r.setWhy(fmt.Sprintf("refused by the filesystem of %s", p))
			slog.Warn("O_DIRECT not supported; using buffered reads", "shard", p, "err", err)
			return r, nil
		}
		r.direct = append(r.direct, f)
	}
	r.useDir.Store(true)
	return r, nil
}

// directIO reports whether reads bypass the page cache.
func (r *reader) directIO() bool { return r.useDir.Load() }

// readAt fills dst from shard at off; dst, off and len(dst) are aligned.
// Reads past the end of the file stop there: want is how many bytes of dst
// must be filled.
func (r *reader) readAt(dst []byte, shard int, off int64, want int) error {
	if r.useDir.Load() {
		err := readFull(r.direct[shard], dst, off, want)
		if !errors.Is(err, syscall.EINVAL) {
			return err
		}
		// Some filesystems accept O_DIRECT at open and refuse at read.
		r.fallback.Do(func() {
			r.setWhy(fmt.Sprintf("refused at read by the filesystem of %s", r.buffered[shard].Name()))
			slog.Warn("O_DIRECT read failed; switching to buffered reads", "shard", r.buffered[shard].Name(), "err", err)
			r.useDir.Store(false)
		})
	}
	return readFull(r.buffered[shard], dst, off, want)
}

func readFull(f *os.File, dst []byte, off int64, want int) error {
	done := 0
	for done < want {
		n, err := pread(f, dst[done:], off+int64(done))
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return fmt.Errorf("read %s at %d: %w", f.Name(), off+int64(done), err)
		}
		if n == 0 {
			return fmt.Errorf("read %s at %d: %w", f.Name(), off+int64(done), io.ErrUnexpectedEOF)
		}
		done += n
	}
	return nil
}

func (r *reader) close() {
	for _, f := range r.buffered {
		f.Close()
	}
	for _, f := range r.direct {
		f.Close()
	}
}
