// Package gguf reads and writes GGUF model files, including checkpoints
// split into NAME-00001-of-000NN.gguf shards.
//
// Opening a model reads only headers, validated as strictly as ggml does
// (and then some), so a corrupt or hostile file fails with an error naming
// the file, key or tensor instead of a crash or a huge allocation. Tensor
// bytes are handed out by reference: a read-only mmap view per shard, or a
// SectionReader for code that prefers pread.
package gguf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/k3-inference/k3/core/quant"
)

// TensorInfo describes one tensor of a model.
type TensorInfo struct {
	Name string
	Type quant.Type
	// Shape is in ggml order: Shape[0] is the row length (ne[0]).
	Shape []int64
	// Shard is the index of the file holding the tensor in File.Paths().
	Shard int
	// Offset is the absolute offset of the tensor's data in its shard file.
	Offset int64
	// Size is the tensor's data size in bytes, without padding.
	Size int64
}

// Elements is the tensor's element count.
func (t TensorInfo) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is an open GGUF model: one file or a whole split set. Its methods
// are safe for concurrent use, except that nothing may use the File, or a
// TensorData view, once Close has been called.
type File struct {
	path      string
	version   uint32
	kvs       []KV
	index     map[string]int
	arch      string
	alignment int64
	tensors   []TensorInfo
	byName    map[string]int
	shards    []*shard
	shardPath []string // where else to look for shards (OpenOptions)

	mu     sync.Mutex
	errs   []error // accessor type errors, reported by Err
	closed atomic.Bool
}

// shard is one file of a model.
type shard struct {
	path string
	f    *os.File // nil when opened from an io.ReaderAt
	r    io.ReaderAt
	size int64

	mapOnce sync.Once
	mapped  []byte
	mapErr  error
}

// Open opens a GGUF file. If its metadata says it is shard 1 of a split
// set, all shards are found by name, opened and validated, and the File
// presents their tensors as one index. Only headers are read.
func Open(path string) (*File, error) { return OpenWith(path, OpenOptions{}) }

// OpenOptions change how Open finds a split set's shards.
type OpenOptions struct {
	// ShardPath lists directories to look in for a shard that is not next
	// to the first (by its file name), in order: shards moved onto other
	// drives, so that their reads add up, stay one model.
	ShardPath []string
}

// OpenWith is Open with options.
func OpenWith(path string, o OpenOptions) (*File, error) {
	s, h, err := openShard(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f := newFile(path, h, s)
	f.shardPath = o.ShardPath
	if err := f.openSplits(h); err != nil {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	return f, nil
}

// OpenReaderAt reads a single GGUF file from r, which holds size bytes.
// name is used in errors. The File cannot be mmapped (TensorData fails);
// TensorReader works. Split metadata is not followed.
func OpenReaderAt(r io.ReaderAt, size int64, name string) (*File, error) {
	h, err := readHeader(r, size)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", name, err)
	}
	return newFile(name, h, &shard{path: name, r: r, size: size}), nil
}

// openShard opens one file and reads its header; errors name the file.
func openShard(path string) (*shard, *header, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		fd.Close()
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	h, err := readHeader(headerReader(fd), st.Size())
	if err != nil {
		fd.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return &shard{path: path, f: fd, r: fd, size: st.Size()}, h, nil
}

// headerReader is what Open reads headers through; tests wrap it to count
// the bytes opening a model reads.
var headerReader = func(f *os.File) io.ReaderAt { return f }

func newFile(path string, h *header, s *shard) *File {
	f := &File{
		path:      path,
		version:   h.version,
		kvs:       h.kvs,
		index:     h.index,
		alignment: h.alignment,
		tensors:   h.tensors,
		shards:    []*shard{s},
	}
	f.arch, _ = f.lookupString("general.architecture")
	f.byName = make(map[string]int, len(f.tensors))
	for i, t := range f.tensors {
		f.byName[t.Name] = i
	}
	return f
}

func (f *File) lookupString(key string) (string, bool) {
	v, ok := f.Lookup(key)
	if !ok {
		return "", false
	}
	s, err := v.AsString()
	return s, err == nil
}

// Path is the path the File was opened with (shard 1 of a split set).
func (f *File) Path() string { return f.path }

// Paths lists the files of the model in shard order; TensorInfo.Shard
// indexes it.
func (f *File) Paths() []string {
	out := make([]string, len(f.shards))
	for i, s := range f.shards {
		out[i] = s.path
	}
	return out
}

// Version is the GGUF version of the (first) file.
func (f *File) Version() uint32 { return f.version }

// Alignment is the data alignment of the (first) file.
func (f *File) Alignment() int64 { return f.alignment }

// KVs returns all metadata in file order. For a split set this is shard
// 1's metadata, as llama.cpp uses it. The slice is shared; do not modify.
func (f *File) KVs() []KV { return f.kvs }

// Arch is general.architecture, or "" when absent.
func (f *File) Arch() string { return f.arch }

// Lookup returns the value of a key, exactly as spelled.
func (f *File) Lookup(key string) (Value, bool) {
	i, ok := f.index[key]
	if !ok {
		return Value{}, false
	}
	return f.kvs[i].Value, true
}

// Tensors returns all tensors, in file order (shard by shard). The slice is
// shared; do not modify.
func (f *File) Tensors() []TensorInfo { return f.tensors }

// Tensor returns the tensor with the given name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.tensors[i], true
}

// TensorData returns a read-only view of a tensor's bytes in a shared,
// read-only mmap of its shard; nothing is copied. Each shard is mapped once,
// on first use. The view is valid until Close; writing to it faults.
func (f *File) TensorData(t TensorInfo) ([]byte, error) {
	s, err := f.shardOf(t)
	if err != nil {
		return nil, err
	}
	s.mapOnce.Do(func() { s.mapped, s.mapErr = s.mmap() })
	if s.mapErr != nil {
		return nil, fmt.Errorf("gguf: %s: tensor %q: %w", s.path, t.Name, s.mapErr)
	}
	return s.mapped[t.Offset : t.Offset+t.Size : t.Offset+t.Size], nil
}

// TensorReader returns a reader over a tensor's bytes that reads the file
// with pread; it stays usable until Close.
func (f *File) TensorReader(t TensorInfo) (*io.SectionReader, error) {
	s, err := f.shardOf(t)
	if err != nil {
		return nil, err
	}
	return io.NewSectionReader(s.r, t.Offset, t.Size), nil
}

// shardOf checks that t is one of f's tensors, so a TensorInfo edited or
// taken from another File cannot address bytes outside its shard.
func (f *File) shardOf(t TensorInfo) (*shard, error) {
	if f.closed.Load() {
		return nil, fmt.Errorf("gguf: %s: file is closed", f.path)
	}
	i, ok := f.byName[t.Name]
	if !ok {
		return nil, fmt.Errorf("gguf: %s: no tensor %q", f.path, t.Name)
	}
	if u := f.tensors[i]; u.Shard != t.Shard || u.Offset != t.Offset || u.Size != t.Size {
		return nil, fmt.Errorf("gguf: %s: tensor %q does not match the file's tensor info", f.path, t.Name)
	}
	return f.shards[t.Shard], nil
}

// Close unmaps and closes every shard. Views from TensorData become invalid.
func (f *File) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, s := range f.shards {
		if s.mapped != nil {
			errs = append(errs, munmap(s.mapped))
			s.mapped = nil
		}
		if s.f != nil {
			errs = append(errs, s.f.Close())
			s.f = nil
		}
	}
	return errors.Join(errs...)
}

func (s *shard) mmap() ([]byte, error) {
	if s.f == nil {
		return nil, errors.New("mmap needs a file opened with Open (use TensorReader)")
	}
	return mmapFile(s.f, s.size)
}

// noPrefix lists key namespaces that are not per-architecture.
var noPrefix = []string{"general.", "tokenizer.", "split.", "adapter.", "quantize."}

// key resolves a short hyperparameter name to its full key: "block_count"
// becomes "<arch>.block_count". Keys already in a known namespace or already
// prefixed with the architecture are left alone.
func (f *File) key(k string) string {
	if f.arch != "" && strings.HasPrefix(k, f.arch+".") {
		return k
	}
	for _, p := range noPrefix {
		if strings.HasPrefix(k, p) {
			return k
		}
	}
	if f.arch == "" {
		return k
	}
	return f.arch + "." + k
}
