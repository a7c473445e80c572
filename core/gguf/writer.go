package gguf

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/k3-inference/k3/core/quant"
)

// TensorSpec declares one tensor to write.
type TensorSpec struct {
	Name  string
	Type  quant.Type
	Shape []int64 // ggml order: Shape[0] is the row length
}

// WriteOptions controls Create.
type WriteOptions struct {
	// Alignment of tensor data; 0 means general.alignment from the KVs if
	// present, else 32. A value other than 32 is recorded as
	// general.alignment in every file.
	Alignment int
	// Split, when set, writes PREFIX-0000i-of-0000N.gguf shards the way
	// llama-gguf-split does.
	Split SplitOptions
}

// SplitOptions chooses where llama-gguf-split would cut; set at most one.
type SplitOptions struct {
	// MaxTensors is the most tensors per shard (gguf-split --split-max-tensors).
	MaxTensors int
	// MaxBytes is the most padded tensor bytes per shard, metadata not
	// counted (gguf-split --split-max-size). A tensor larger than this gets
	// a shard of its own.
	MaxBytes int64
}

func (s SplitOptions) enabled() bool { return s.MaxTensors > 0 || s.MaxBytes > 0 }

// writeBufSize is the buffered writer size: large enough that each write
// syscall moves megabytes.
const writeBufSize = 8 << 20

// Writer streams a GGUF file or split set. Tensor data is written in the
// declared order through Write or WriteTensor; padding is inserted between
// tensors, and each shard is finished and the next started automatically.
type Writer struct {
	shards []shardPlan
	align  int64

	cur    int // index of the current shard
	tensor int // index of the current tensor within the shard
	left   int64
	file   *os.File
	bw     *bufio.Writer
	err    error // sticky
	closed bool
}

type shardPlan struct {
	path    string
	kvs     []KV
	tensors []TensorSpec
	sizes   []int64
}

// Create validates the metadata and tensor specs, plans the shards and
// writes the first header. path is the output file; with o.Split it is
// the PREFIX of the shard names (a trailing ".gguf" is dropped).
func Create(path string, kvs []KV, tensors []TensorSpec, o WriteOptions) (*Writer, error) {
	align, kvs, err := resolveAlignment(kvs, o.Alignment)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	sizes, err := checkSpecs(kvs, tensors)
	if err != nil {
		return nil, fmt.Errorf("gguf: %s: %w", path, err)
	}
	w := &Writer{align: align}
	if o.Split.enabled() {
		w.shards, err = planSplit(strings.TrimSuffix(path, ".gguf"), kvs, tensors, sizes, align, o.Split)
		if err != nil {
			return nil, fmt.Errorf("gguf: %s: %w", path, err)
		}
	} else {
		w.shards = []shardPlan{{path: path, kvs: kvs, tensors: tensors, sizes: sizes}}
	}
	if err := w.startShard(0); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// resolveAlignment reconciles o.Alignment with a general.alignment KV and
// returns the KVs with general.alignment present iff it is not 32.
func resolveAlignment(kvs []KV, opt int) (int64, []KV, error) {
	align := int64(opt)
	at := -1
	for i, kv := range kvs {
		if kv.Key != "general.alignment" {
			continue
		}
		a, ok := kv.Value.V.(uint32)
		if !ok || kv.Value.Type != TypeUint32 {
			return 0, nil, fmt.Errorf("key \"general.alignment\" must be u32, is %s", kv.Value.typeName())
		}
		if align != 0 && int64(a) != align {
			return 0, nil, fmt.Errorf("key \"general.alignment\" is %d but WriteOptions.Alignment is %d", a, align)
		}
		align, at = int64(a), i
	}
	if align == 0 {
		align = DefaultAlignment
	}
	if align < 0 || align > 1<<30 || align&(align-1) != 0 {
		return 0, nil, fmt.Errorf("alignment %d is not a power of two", align)
	}
	if at < 0 && align != DefaultAlignment {
		kvs = append(append([]KV(nil), kvs...), KV{"general.alignment", U32(uint32(align))})
	}
	return align, kvs, nil
}

func checkSpecs(kvs []KV, tensors []TensorSpec) ([]int64, error) {
	keys := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		if kv.Key == "" {
			return nil, errors.New("empty key")
		}
		if keys[kv.Key] {
			return nil, fmt.Errorf("key %q given twice", kv.Key)
		}
		keys[kv.Key] = true
		if err := kv.Value.check(); err != nil {
			return nil, fmt.Errorf("key %q: %w", kv.Key, err)
		}
	}
	names := make(map[string]bool, len(tensors))
	sizes := make([]int64, len(tensors))
	for i, t := range tensors {
		switch {
		case t.Name == "" || len(t.Name) > maxNameLen:
			return nil, fmt.Errorf("tensor %d: name %q must have 1 to %d bytes", i, t.Name, maxNameLen)
		case names[t.Name]:
			return nil, fmt.Errorf("tensor %q given twice", t.Name)
		case len(t.Shape) < 1 || len(t.Shape) > maxDims:
			return nil, fmt.Errorf("tensor %q: %d dimensions, want 1 to %d", t.Name, len(t.Shape), maxDims)
		}
		names[t.Name] = true
		for j, d := range t.Shape {
			if d <= 0 {
				return nil, fmt.Errorf("tensor %q: dimension %d is %d, must be positive", t.Name, j, d)
			}
		}
		size, err := tensorBytes(t.Type, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		sizes[i] = size
	}
	return sizes, nil
}

// planSplit cuts the tensor list the way llama-gguf-split does: shard 1
// carries all metadata, every shard gets split.no (u16), split.count (u16)
// and split.tensors.count (i32), appended after the other KVs (or replacing
// existing split keys in place). Unlike gguf-split, the other shards also
// carry the identity keys of shard 1 (shardIdentity), so that a shard of
// another model with the same tensors is caught at load; llama.cpp reads
// only split.no from them.
func planSplit(prefix string, kvs []KV, tensors []TensorSpec, sizes []int64, align int64, o SplitOptions) ([]shardPlan, error) {
	if o.MaxTensors > 0 && o.MaxBytes > 0 {
		return nil, errors.New("split by tensor count or by size, not both")
	}
	if len(tensors) > 1<<31-1 {
		return nil, fmt.Errorf("%d tensors do not fit split.tensors.count (i32)", len(tensors))
	}
	var shards []shardPlan
	var cur shardPlan
	var bytes int64
	for i, t := range tensors {
		padded := alignUp(sizes[i], align)
		cut := false
		if o.MaxBytes > 0 {
			// Unlike gguf-split, which fails here, a first tensor larger
			// than MaxBytes simply gets its own shard.
			cut = len(cur.tensors) > 0 && bytes+padded > o.MaxBytes
		} else {
			cut = i > 0 && i%o.MaxTensors == 0
		}
		if cut {
			shards = append(shards, cur)
			cur, bytes = shardPlan{}, 0
		}
		cur.tensors = append(cur.tensors, t)
		cur.sizes = append(cur.sizes, sizes[i])
		bytes += padded
	}
	shards = append(shards, cur)
	if len(shards) > 65535 {
		return nil, fmt.Errorf("%d shards do not fit split.count (u16)", len(shards))
	}
	for i := range shards {
		var base []KV
		if i == 0 {
			base = kvs
		} else {
			if align != DefaultAlignment {
				base = []KV{{"general.alignment", U32(uint32(align))}}
			}
			for _, kv := range kvs {
				if slices.Contains(shardIdentity, kv.Key) {
					base = append(base, kv)
				}
			}
		}
		shards[i].kvs = setKVs(base,
			KV{KeySplitNo, U16(uint16(i))},
			KV{KeySplitCount, U16(uint16(len(shards)))},
			KV{KeySplitTensorsCount, I32(int32(len(tensors)))})
		shards[i].path = SplitPath(prefix, i, len(shards))
	}
	return shards, nil
}

// shardIdentity are the keys of shard 1 that k3 also writes on the other
// shards of a split set: what tells one model (or one quantization of it)
// from another with the same tensor names and shapes.
var shardIdentity = []string{"general.architecture", "general.name", "general.uuid", "general.file_type"}

// setKVs returns kvs with each of set replacing the KV of the same key in
// place, or appended, like gguf_set_val_*.
func setKVs(kvs []KV, set ...KV) []KV {
	out := append([]KV(nil), kvs...)
	for _, s := range set {
		found := false
		for i := range out {
			if out[i].Key == s.Key {
				out[i], found = s, true
			}
		}
		if !found {
			out = append(out, s)
		}
	}
	return out
}

// Paths lists the files the Writer writes, in shard order.
func (w *Writer) Paths() []string {
	out := make([]string, len(w.shards))
	for i, s := range w.shards {
		out[i] = s.path
	}
	return out
}
