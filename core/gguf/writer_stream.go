package gguf

import (
	"bufio"
	"errors"
	"fmt"
	"os"
)

// encodeHeader returns a shard's header, not padded: the tensor data
// starts at alignUp(len(header), align), and the zeros before it are
// written as they are needed (an alignment may be up to 1 GiB).
func encodeHeader(s shardPlan, align int64) ([]byte, error) {
	b := []byte(magic)
	b = le.AppendUint32(b, Version)
	b = le.AppendUint64(b, uint64(len(s.tensors)))
	b = le.AppendUint64(b, uint64(len(s.kvs)))
	var err error
	for _, kv := range s.kvs {
		b = appendString(b, kv.Key)
		if b, err = appendValue(b, kv.Value); err != nil {
			return nil, fmt.Errorf("key %q: %w", kv.Key, err)
		}
	}
	var off int64
	for i, t := range s.tensors {
		b = appendString(b, t.Name)
		b = le.AppendUint32(b, uint32(len(t.Shape)))
		for _, d := range t.Shape {
			b = le.AppendUint64(b, uint64(d))
		}
		b = le.AppendUint32(b, uint32(t.Type))
		b = le.AppendUint64(b, uint64(off))
		off += alignUp(s.sizes[i], align)
	}
	return b, nil
}

// startShard creates shard i's file and writes its header.
func (w *Writer) startShard(i int) error {
	s := w.shards[i]
	hdr, err := encodeHeader(s, w.align)
	if err != nil {
		return w.fail(fmt.Errorf("gguf: %s: %w", s.path, err))
	}
	f, err := os.Create(s.path)
	if err != nil {
		return w.fail(fmt.Errorf("gguf: %w", err))
	}
	w.cur, w.tensor, w.file = i, 0, f
	if w.bw == nil {
		w.bw = bufio.NewWriterSize(f, writeBufSize)
	} else {
		w.bw.Reset(f)
	}
	if _, err := w.bw.Write(hdr); err != nil {
		return w.fail(fmt.Errorf("gguf: %s: %w", s.path, err))
	}
	// ggml pads the header even when no tensor follows.
	if err := w.pad(int64(len(hdr))); err != nil {
		return err
	}
	if len(s.sizes) > 0 {
		w.left = s.sizes[0]
	}
	return w.advance()
}

// advance moves past finished tensors (zero-size ones included) and
// finished shards, padding and switching files as needed.
func (w *Writer) advance() error {
	for w.left == 0 {
		s := w.shards[w.cur]
		if w.tensor < len(s.tensors) {
			if err := w.pad(s.sizes[w.tensor]); err != nil {
				return err
			}
			w.tensor++
			if w.tensor < len(s.tensors) {
				w.left = s.sizes[w.tensor]
				continue
			}
		}
		// The shard is complete.
		if err := w.finishFile(); err != nil {
			return err
		}
		if w.cur+1 == len(w.shards) {
			return nil
		}
		return w.startShard(w.cur + 1)
	}
	return nil
}

// pad writes the zeros that align the end of size bytes.
func (w *Writer) pad(size int64) error {
	var zeros [4096]byte
	for n := alignUp(size, w.align) - size; n > 0; {
		k := min(n, int64(len(zeros)))
		if _, err := w.bw.Write(zeros[:k]); err != nil {
			return w.fail(fmt.Errorf("gguf: %s: %w", w.shards[w.cur].path, err))
		}
		n -= k
	}
	return nil
}

func (w *Writer) finishFile() error {
	if w.file == nil {
		return nil
	}
	path := w.shards[w.cur].path
	err := w.bw.Flush()
	if cerr := w.file.Close(); err == nil {
		err = cerr
	}
	w.file = nil
	if err != nil {
		return w.fail(fmt.Errorf("gguf: %s: %w", path, err))
	}
	return nil
}

func (w *Writer) done() bool {
	return w.file == nil && w.cur == len(w.shards)-1
}

// Current returns the tensor the next Write goes to; ok is false once all
// tensors are complete.
func (w *Writer) Current() (t TensorSpec, remaining int64, ok bool) {
	if w.err != nil || w.done() {
		return TensorSpec{}, 0, false
	}
	return w.shards[w.cur].tensors[w.tensor], w.left, true
}

// Write writes tensor data in declared order; p may span tensor and shard
// boundaries. Writing past the last tensor is an error.
func (w *Writer) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if w.err != nil {
			return n, w.err
		}
		if w.done() {
			return n, w.fail(fmt.Errorf("gguf: %s: %d bytes written past the last tensor", w.shards[w.cur].path, len(p)))
		}
		k := int(min(int64(len(p)), w.left))
		if err := w.put(p[:k]); err != nil {
			return n, w.fail(fmt.Errorf("gguf: %s: %w", w.shards[w.cur].path, err))
		}
		n += k
		p = p[k:]
		w.left -= int64(k)
		if err := w.advance(); err != nil {
			return n, err
		}
	}
	return n, nil
}

// directWrite is the size from which caller buffers skip the bufio copy.
const directWrite = 512 << 10

// put writes tensor bytes. Large caller buffers go straight to the file
// (after what is buffered), saving a copy; small ones are batched.
func (w *Writer) put(p []byte) error {
	if len(p) < directWrite {
		_, err := w.bw.Write(p)
		return err
	}
	if err := w.bw.Flush(); err != nil {
		return err
	}
	_, err := w.file.Write(p)
	return err
}

// WriteTensor writes a whole tensor, which must be the next one and must
// not have been partly written.
func (w *Writer) WriteTensor(name string, data []byte) error {
	t, left, ok := w.Current()
	switch {
	case w.err != nil:
		return w.err
	case !ok:
		return fmt.Errorf("gguf: tensor %q: all tensors are already written", name)
	case t.Name != name:
		return fmt.Errorf("gguf: tensor %q written out of order: tensor %q is next", name, t.Name)
	case int64(len(data)) != left:
		return fmt.Errorf("gguf: tensor %q: got %d bytes, want %d", name, len(data), left)
	}
	_, err := w.Write(data)
	return err
}

// Close finishes the last file. If any tensor is incomplete it returns an
// error and removes every file it created, so no truncated model is left
// behind that looks finished.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err == nil && !w.done() {
		t := w.shards[w.cur].tensors[w.tensor]
		w.err = fmt.Errorf("gguf: %s: closed before tensor %q was complete (%d bytes missing)", w.shards[w.cur].path, t.Name, w.left)
	}
	if w.err == nil {
		return nil
	}
	if w.file != nil {
		w.file.Close()
		w.file = nil
	}
	var errs []error
	for i := 0; i <= w.cur && i < len(w.shards); i++ {
		if err := os.Remove(w.shards[i].path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(append([]error{w.err}, errs...)...)
}

func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return w.err
}
