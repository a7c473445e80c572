package gguf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// The split keys llama-gguf-split writes on every shard.
const (
	KeySplitNo           = "split.no"
	KeySplitCount        = "split.count"
	KeySplitTensorsCount = "split.tensors.count"
)

// SplitPath is the name of shard i (0-based) of n: PREFIX-0000i+1-of-0000n.gguf,
// llama.cpp's llama_split_path.
func SplitPath(prefix string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, i+1, n)
}

var splitSuffix = regexp.MustCompile(`-(\d{5})-of-(\d{5})\.gguf$`)

// SplitPrefix returns the PREFIX of a shard path, and its 0-based shard
// index and shard count; ok is false if the name is not a shard name.
func SplitPrefix(path string) (prefix string, i, n int, ok bool) {
	m := splitSuffix.FindStringSubmatchIndex(path)
	if m == nil {
		return "", 0, 0, false
	}
	i, _ = strconv.Atoi(path[m[2]:m[3]])
	n, _ = strconv.Atoi(path[m[4]:m[5]])
	return path[:m[0]], i - 1, n, true
}

// splitKey reads an integer split key of a shard's header.
func splitKey(h *header, key string) (int64, bool, error) {
	i, ok := h.index[key]
	if !ok {
		return 0, false, nil
	}
	n, err := h.kvs[i].Value.AsInt()
	if err != nil {
		return 0, true, fmt.Errorf("key %q: %w", key, err)
	}
	return n, true, nil
}

// openSplits follows shard 1's split metadata, as llama.cpp's model loader
// does: the other shards are named after the first, each must say which
// shard it is, and together they must hold split.tensors.count tensors
// with no name twice.
func (f *File) openSplits(h *header) error {
	count, has, err := splitKey(h, KeySplitCount)
	if err != nil || !has || count <= 1 {
		return err
	}
	if count > 99999 {
		return fmt.Errorf("key %q is %d, more shards than the file naming allows", KeySplitCount, count)
	}
	no, has, err := splitKey(h, KeySplitNo)
	if err != nil {
		return err
	}
	if !has {
		return fmt.Errorf("key %q is %d but key %q is missing", KeySplitCount, count, KeySplitNo)
	}
	if no != 0 {
		hint := ""
		if p, _, _, ok := SplitPrefix(f.path); ok {
			hint = fmt.Sprintf(" (%s)", SplitPath(p, 0, int(count)))
		}
		return fmt.Errorf("this is shard %d of %d; a split model is opened through its first shard%s", no+1, count, hint)
	}
	want, has, err := splitKey(h, KeySplitTensorsCount)
	if err != nil {
		return err
	}
	if !has {
		return fmt.Errorf("split model without key %q", KeySplitTensorsCount)
	}
	n := int(count)
	suffix := fmt.Sprintf("-%05d-of-%05d.gguf", 1, n)
	if !strings.HasSuffix(f.path, suffix) || len(f.path) == len(suffix) {
		return fmt.Errorf("shard 1 of a %d-shard model must be named PREFIX%s", n, suffix)
	}
	prefix := strings.TrimSuffix(f.path, suffix)
	if err := f.addShards(h, prefix, n, want); err != nil {
		return err
	}
	if int64(len(f.tensors)) != want {
		return fmt.Errorf("the %d shards hold %d tensors, key %q says %d", n, len(f.tensors), KeySplitTensorsCount, want)
	}
	return checkExtraShards(prefix, n)
}

// addShards opens shards 2..n concurrently (headers only; on a cold disk
// the latency of each first read dominates), checks that each belongs to
// the model whose first header is first, and adds them in order.
func (f *File) addShards(first *header, prefix string, n int, tensors int64) error {
	type result struct {
		s   *shard
		h   *header
		err error
	}
	res := make([]result, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := 1; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s, h, err := openShard(f.findShard(SplitPath(prefix, i, n)))
			res[i] = result{s, h, err}
		}()
	}
	wg.Wait()
	var errs []error
	for i := 1; i < n; i++ {
		r := res[i]
		if r.err != nil {
			if errors.Is(r.err, fs.ErrNotExist) {
				where := ""
				if len(f.shardPath) > 0 {
					where = " (nor in " + strings.Join(f.shardPath, ", ") + ")"
				}
				r.err = fmt.Errorf("shard %d of %d is missing%s: %w", i+1, n, where, r.err)
			}
			errs = append(errs, r.err)
			continue
		}
		f.shards = append(f.shards, r.s)
		if err := checkShardKeys(first, r.h, i, n, tensors); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.s.path, err))
			continue
		}
		if err := f.addTensors(r.h, len(f.shards)-1); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.s.path, err))
		}
	}
	return errors.Join(errs...)
}

// findShard is where shard file path is: there, or else the first
// directory of the shard path holding a file of its name (path itself
// when none does, for the error).
func (f *File) findShard(path string) string {
	if _, err := os.Stat(path); err == nil {
		return path
	}
	for _, dir := range f.shardPath {
		p := filepath.Join(dir, filepath.Base(path))
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return path
}

// checkShardKeys checks that shard i (0-based) of n belongs to the set
// whose first header is first. llama-gguf-split (and gguf-py's splitting
// writer) put split.no, split.count and split.tensors.count on every shard
// and the model's metadata on the first only, so a shard of another model
// with the same tensor names and shapes shows only where a shard carries
// identity keys too (k3's writer copies general.architecture, .name, .uuid
// and .file_type): every general.* key both headers have must agree.
func checkShardKeys(first, h *header, i, n int, tensors int64) error {
	for _, k := range []struct {
		key  string
		want int64
	}{{KeySplitNo, int64(i)}, {KeySplitCount, int64(n)}, {KeySplitTensorsCount, tensors}} {
		v, has, err := splitKey(h, k.key)
		switch {
		case err != nil:
			return err
		case !has:
			return fmt.Errorf("key %q is missing; every shard of a split model has it", k.key)
		case v == k.want:
		case k.key == KeySplitNo:
			return fmt.Errorf("key %q says shard %d, the name says shard %d", KeySplitNo, v+1, i+1)
		default:
			return fmt.Errorf("key %q is %d, shard 1 says %d: a shard of another model?", k.key, v, k.want)
		}
	}
	for _, kv := range h.kvs {
		if !strings.HasPrefix(kv.Key, "general.") || kv.Key == "general.alignment" {
			continue // general.alignment is the file's layout, not the model
		}
		j, ok := first.index[kv.Key]
		if !ok {
			continue
		}
		if want := first.kvs[j].Value; !reflect.DeepEqual(kv.Value, want) {
			return fmt.Errorf("key %q is %s, shard 1 says %s: this shard belongs to another model", kv.Key, kv.Value, want)
		}
	}
	return nil
}

func (f *File) addTensors(h *header, shard int) error {
	for _, t := range h.tensors {
		if j, dup := f.byName[t.Name]; dup {
			return fmt.Errorf("tensor %q is also in shard %d", t.Name, f.tensors[j].Shard+1)
		}
		t.Shard = shard
		f.byName[t.Name] = len(f.tensors)
		f.tensors = append(f.tensors, t)
	}
	return nil
}

// checkExtraShards rejects files next to the set that look like its shards
// but are not part of it (a leftover -00005-of-00005.gguf beside a 4-shard
// set, say), since the user most likely meant a different set.
func checkExtraShards(prefix string, n int) error {
	dir, base := filepath.Split(prefix)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list shards: %w", err)
	}
	var extra []string
	for _, e := range entries {
		p, i, m, ok := SplitPrefix(e.Name())
		if !ok || p != base {
			continue
		}
		if m != n || i < 0 || i >= n {
			extra = append(extra, e.Name())
		}
	}
	if len(extra) > 0 {
		return fmt.Errorf("found %s next to the %d-shard set %s; remove or move it", strings.Join(extra, ", "), n, SplitPath(base, 0, n))
	}
	return nil
}
