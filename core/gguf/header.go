package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"
)

// Limits taken from ggml: a tensor has at most 4 dimensions and a name
// shorter than GGML_MAX_NAME bytes.
const (
	maxDims    = 4
	maxNameLen = 63
	// DefaultAlignment is the data alignment when general.alignment is absent.
	DefaultAlignment = 32
	magic            = "GGUF"
	// Version is the GGUF version the writer produces.
	Version = 3
)

// Smallest possible encodings, used to bound a claimed count by the bytes
// left in the file before anything is allocated for it.
const (
	minKVBytes     = 8 + 1 + 4 + 1 // key length, 1-byte key, type, 1-byte value
	minTensorBytes = 8 + 4 + 4 + 8 // name length, n_dims, type, offset
)

// header is what one GGUF file's header says. Tensor offsets are absolute
// file offsets.
type header struct {
	version    uint32
	kvs        []KV
	index      map[string]int
	alignment  int64
	dataOffset int64
	tensors    []TensorInfo
	size       int64
}

// bufReader reads the header through a window over an io.ReaderAt. The
// window starts small and doubles, so a small header costs a few small reads
// and the read-ahead past the header end stays under the header's own size.
type bufReader struct {
	r     io.ReaderAt
	size  int64
	pos   int64  // file offset of the next byte
	buf   []byte // file[start : start+len(buf)]
	start int64
	chunk int
}

const (
	firstChunk = 4 << 10
	maxChunk   = 1 << 20
)

func (b *bufReader) remaining() int64 { return b.size - b.pos }

// next returns the next n bytes; the slice is valid until the next call.
func (b *bufReader) next(n int64) ([]byte, error) {
	if n < 0 || n > b.remaining() {
		return nil, fmt.Errorf("unexpected end of file at offset %d: need %d bytes, %d left", b.pos, n, b.remaining())
	}
	off := b.pos - b.start
	if off >= 0 && off+n <= int64(len(b.buf)) {
		b.pos += n
		return b.buf[off : off+n], nil
	}
	want := int64(b.chunk)
	if b.chunk < maxChunk {
		b.chunk *= 2
	}
	want = max(want, n)
	want = min(want, b.remaining())
	buf := b.buf[:0]
	if int64(cap(buf)) < want {
		buf = make([]byte, want)
	}
	buf = buf[:want]
	if k, err := b.r.ReadAt(buf, b.pos); k < len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read at offset %d: %w", b.pos, err)
	}
	b.buf, b.start = buf, b.pos
	b.pos += n
	return buf[:n], nil
}

func (b *bufReader) u32() (uint32, error) {
	p, err := b.next(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p), nil
}

func (b *bufReader) u64() (uint64, error) {
	p, err := b.next(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(p), nil
}

func (b *bufReader) str() (string, error) {
	n, err := b.u64()
	if err != nil {
		return "", err
	}
	if n > uint64(b.remaining()) {
		return "", fmt.Errorf("string of %d bytes at offset %d runs past the end of the file (%d bytes left)", n, b.pos-8, b.remaining())
	}
	p, err := b.next(int64(n))
	if err != nil {
		return "", err
	}
	return string(p), nil
}

// readHeader parses and validates a GGUF header. It reads nothing past the
// header (beyond read-ahead) and allocates in proportion to the bytes it
// reads, whatever the counts in the file claim.
func readHeader(r io.ReaderAt, size int64) (*header, error) {
	b := &bufReader{r: r, size: size, chunk: firstChunk}
	h := &header{size: size, alignment: DefaultAlignment}
	if err := h.readPreamble(b); err != nil {
		return nil, err
	}
	nTensors, err := b.u64()
	if err != nil {
		return nil, err
	}
	nKV, err := b.u64()
	if err != nil {
		return nil, err
	}
	// Every KV and tensor info takes a minimum number of bytes, so counts
	// that cannot fit in the rest of the file are rejected before anything
	// is allocated for them.
	if left := b.remaining(); nKV > uint64(left/minKVBytes) {
		return nil, fmt.Errorf("header claims %d key-value pairs but only %d bytes follow", nKV, left)
	}
	if left := b.remaining(); nTensors > uint64(left/minTensorBytes) {
		return nil, fmt.Errorf("header claims %d tensors but only %d bytes follow", nTensors, left)
	}
	if err := h.readKVs(b, int(nKV)); err != nil {
		return nil, err
	}
	if err := h.readAlignment(); err != nil {
		return nil, err
	}
	if err := h.readTensorInfos(b, int(nTensors)); err != nil {
		return nil, err
	}
	h.dataOffset = b.pos
	if len(h.tensors) > 0 {
		// Like ggml, only a file with tensors has its data section padded.
		h.dataOffset = alignUp(b.pos, h.alignment)
	}
	if err := h.placeTensors(); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *header) readPreamble(b *bufReader) error {
	p, err := b.next(4)
	if err != nil {
		return fmt.Errorf("not a GGUF file: %w", err)
	}
	if string(p) != magic {
		return fmt.Errorf("not a GGUF file: magic is %q, want %q", p, magic)
	}
	v, err := b.u32()
	if err != nil {
		return err
	}
	switch {
	case v == 1:
		return fmt.Errorf("GGUF version 1 is not supported (llama.cpp dropped it too); convert the file again")
	case v != 0 && v&0xFFFF == 0:
		return fmt.Errorf("GGUF version %#x: the file is big-endian, k3 reads little-endian GGUF only", v)
	case v < 2 || v > Version:
		return fmt.Errorf("GGUF version %d is not supported (k3 reads versions 2 and 3)", v)
	}
	h.version = v
	return nil
}

func (h *header) readKVs(b *bufReader, n int) error {
	h.kvs = make([]KV, 0, n)
	h.index = make(map[string]int, n)
	for i := range n {
		key, err := b.str()
		if err != nil {
			return fmt.Errorf("key %d: %w", i, err)
		}
		if key == "" {
			return fmt.Errorf("key %d is empty", i)
		}
		if _, dup := h.index[key]; dup {
			return fmt.Errorf("key %q appears twice", key)
		}
		v, err := readValue(b)
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		h.index[key] = len(h.kvs)
		h.kvs = append(h.kvs, KV{Key: key, Value: v})
	}
	return nil
}

func readValue(b *bufReader) (Value, error) {
	t, err := b.u32()
	if err != nil {
		return Value{}, err
	}
	typ := ValueType(t)
	if typ != TypeArray {
		if typ == TypeString {
			s, err := b.str()
			return Str(s), err
		}
		if typ.size() == 0 {
			return Value{}, fmt.Errorf("unknown value type %d", t)
		}
		p, err := b.next(int64(typ.size()))
		if err != nil {
			return Value{}, err
		}
		return Value{Type: typ, V: decodeScalar(typ, p)}, nil
	}
	et, err := b.u32()
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	n, err := b.u64()
	if err != nil {
		return Value{}, err
	}
	switch {
	case elem == TypeArray:
		return Value{}, fmt.Errorf("arrays of arrays are not supported (llama.cpp rejects them too)")
	case elem == TypeString:
		return readStringArray(b, n)
	case elem.size() == 0:
		return Value{}, fmt.Errorf("array of unknown value type %d", et)
	}
	es := uint64(elem.size())
	if n > uint64(b.remaining())/es {
		return Value{}, fmt.Errorf("array of %d %s runs past the end of the file (%d bytes left)", n, elem, b.remaining())
	}
	p, err := b.next(int64(n * es))
	if err != nil {
		return Value{}, err
	}
	return Value{Type: TypeArray, Elem: elem, V: decodeArray(elem, p, int(n))}, nil
}

func readStringArray(b *bufReader, n uint64) (Value, error) {
	// Each string takes at least its 8-byte length.
	if n > uint64(b.remaining())/8 {
		return Value{}, fmt.Errorf("array of %d strings runs past the end of the file (%d bytes left)", n, b.remaining())
	}
	out := make([]string, n)
	for i := range out {
		s, err := b.str()
		if err != nil {
			return Value{}, fmt.Errorf("string %d: %w", i, err)
		}
		out[i] = s
	}
	return Strs(out), nil
}

func (h *header) readAlignment() error {
	i, ok := h.index["general.alignment"]
	if !ok {
		return nil
	}
	v := h.kvs[i].Value
	a, isU32 := v.V.(uint32)
	if !isU32 {
		return fmt.Errorf("key \"general.alignment\" must be u32, is %s", v.typeName())
	}
	if a == 0 || a&(a-1) != 0 {
		return fmt.Errorf("key \"general.alignment\" is %d, not a power of two", a)
	}
	h.alignment = int64(a)
	return nil
}

func (h *header) readTensorInfos(b *bufReader, n int) error {
	h.tensors = make([]TensorInfo, 0, n)
	seen := make(map[string]bool, n)
	for i := range n {
		name, err := b.str()
		if err != nil {
			return fmt.Errorf("tensor %d: name: %w", i, err)
		}
		t, err := readTensorInfo(b, name)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
		if seen[name] {
			return fmt.Errorf("tensor %q appears twice", name)
		}
		seen[name] = true
		h.tensors = append(h.tensors, t)
	}
	return nil
}

// readTensorInfo reads the fields after the name. Offset is left relative to
// the data section; placeTensors makes it absolute.
func readTensorInfo(b *bufReader, name string) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	if name == "" {
		return t, errors.New("empty tensor name")
	}
	if len(name) > maxNameLen {
		return t, fmt.Errorf("name is %d bytes, ggml allows at most %d", len(name), maxNameLen)
	}
	nd, err := b.u32()
	if err != nil {
		return t, err
	}
	if nd > maxDims {
		return t, fmt.Errorf("%d dimensions, at most %d allowed", nd, maxDims)
	}
	t.Shape = make([]int64, nd)
	for j := range t.Shape {
		d, err := b.u64()
		if err != nil {
			return t, err
		}
		if int64(d) <= 0 {
			return t, fmt.Errorf("dimension %d is %d, must be positive", j, int64(d))
		}
		t.Shape[j] = int64(d)
	}
	typ, err := b.u32()
	if err != nil {
		return t, err
	}
	t.Type = qtype(typ)
	if t.Size, err = tensorBytes(t.Type, t.Shape); err != nil {
		return t, err
	}
	off, err := b.u64()
	if err != nil {
		return t, err
	}
	if off > math.MaxInt64 {
		return t, fmt.Errorf("data offset %d is out of range", off)
	}
	t.Offset = int64(off)
	return t, nil
}

// placeTensors checks the data layout the way ggml does: tensors packed in
// order, each at the next multiple of the alignment, all inside the file.
func (h *header) placeTensors() error {
	var next int64 // relative offset where the next tensor must start
	for i := range h.tensors {
		t := &h.tensors[i]
		rel := t.Offset
		switch {
		case rel%h.alignment != 0:
			return fmt.Errorf("tensor %q: data offset %d is not a multiple of general.alignment %d", t.Name, rel, h.alignment)
		case rel < next:
			return fmt.Errorf("tensor %q: data at offset %d overlaps tensor %q, which ends at %d", t.Name, rel, h.tensors[i-1].Name, h.tensors[i-1].Offset-h.dataOffset+h.tensors[i-1].Size)
		case rel > next:
			return fmt.Errorf("tensor %q: data offset %d leaves a gap after the previous tensor, want %d (ggml requires tensors packed in order)", t.Name, rel, next)
		}
		if rel > h.size-h.dataOffset || t.Size > h.size-h.dataOffset-rel {
			return fmt.Errorf("tensor %q: data [%d, +%d) lies outside the file (%d bytes)", t.Name, h.dataOffset+rel, t.Size, h.size)
		}
		t.Offset = h.dataOffset + rel
		// Cannot overflow: Size fits in the file, so it is far below MaxInt64.
		next = alignUp(rel+t.Size, h.alignment)
	}
	return nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// clip shortens s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
