package gguf

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"os"
)

// fingerprintSample is how many bytes of each sampled tensor's data the
// fingerprint reads: enough to tell two files with the same layout but
// other weights (a fine-tune, another random seed) apart, little enough to
// cost nothing on a model of hundreds of shards.
const (
	fingerprintSample  = 4096
	fingerprintTensors = 64
)

// Fingerprint identifies the model in f: a SHA-256 of every metadata key
// and value, the tensor table (name, type, shape, shard, offset, size) and
// the first bytes of up to 64 tensors spread over the table, read from
// the shard files (nothing is mapped). What a model file produces (a
// saved sequence state, a prefix cache entry) is valid for another file
// only when the fingerprints agree.
func (f *File) Fingerprint() ([32]byte, error) {
	h := sha256.New()
	fmt.Fprintf(h, "gguf v%d %d kvs %d tensors\x00", f.version, len(f.kvs), len(f.tensors))
	for _, kv := range f.kvs {
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%v\x00", kv.Key, kv.Value.Type, kv.Value.Elem, kv.Value.V)
	}
	for _, t := range f.tensors {
		fmt.Fprintf(h, "%s\x00%d\x00%v\x00%d\x00%d\x00%d\x00", t.Name, t.Type, t.Shape, t.Shard, t.Offset, t.Size)
	}
	if err := f.hashSamples(h); err != nil {
		return [32]byte{}, err
	}
	var out [32]byte
	h.Sum(out[:0])
	return out, nil
}

func (f *File) hashSamples(h hash.Hash) error {
	n := len(f.tensors)
	if n == 0 {
		return nil
	}
	step := max(1, n/fingerprintTensors)
	files := map[int]*os.File{}
	defer func() {
		for _, fh := range files {
			fh.Close()
		}
	}()
	buf := make([]byte, fingerprintSample)
	for i := 0; i < n; i += step {
		t := f.tensors[i]
		fh, ok := files[t.Shard]
		if !ok {
			var err error
			if fh, err = os.Open(f.shards[t.Shard].path); err != nil {
				return fmt.Errorf("gguf: fingerprint: %w", err)
			}
			files[t.Shard] = fh
		}
		b := buf[:min(int64(len(buf)), t.Size)]
		if _, err := fh.ReadAt(b, t.Offset); err != nil && err != io.EOF {
			return fmt.Errorf("gguf: fingerprint: %s: tensor %q: %w", fh.Name(), t.Name, err)
		}
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(i)))
		h.Write(b)
	}
	return nil
}
