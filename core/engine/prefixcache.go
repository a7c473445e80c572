package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// CacheOptions configure the prefix cache: snapshots of prompt prefixes
// (a system prompt and tools block many conversations share, a whole
// earlier prompt) that any slot can resume from instead of prefilling
// them, kept in memory and optionally on disk, where they survive a
// restart.
type CacheOptions struct {
	// Mem is the memory the cache's entries may take, least recently used
	// dropped first; 0 keeps none in memory (disk only, when Dir is set).
	Mem int64
	// Dir, when set, keeps entries on disk too, one file each, written
	// atomically; files of another model or that fail their checksum are
	// ignored with a warning.
	Dir string
	// DiskMax bounds the bytes of entries in Dir, least recently used
	// deleted first; <= 0: no bound.
	DiskMax int64
	// Fingerprint identifies the model file (gguf.File.Fingerprint); disk
	// entries of another fingerprint are never loaded.
	Fingerprint [32]byte
	// MinShared is the shortest shared prefix worth its own snapshot;
	// <= 0: DefaultMinShared.
	MinShared int
	// Logger receives the warnings; nil: slog.Default().
	Logger *slog.Logger
}

// DefaultMinShared is the shortest prefix a prompt shares with another
// sequence that the engine snapshots into the prefix cache.
const DefaultMinShared = 32

func (o CacheOptions) enabled() bool { return o.Mem > 0 || o.Dir != "" }

// cacheEntry is a snapshot of a sequence after tokens, with the logits of
// the last of them. tokens, logits and state never change once made, so
// they are shared with the slots that load them.
type cacheEntry struct {
	key    string
	tokens []int32
	logits []float32
	state  []byte // the sequence's binary form; nil while only on disk
	used   uint64
	// writing is set while the disk writer holds the entry's state.
	writing bool
	// path and disk are the entry's file and its size ("" and 0: none).
	path string
	disk int64
}

func (c *cacheEntry) memBytes() int64 {
	if c.state == nil {
		return 0
	}
	return int64(len(c.state)) + 4*int64(len(c.logits)) + 4*int64(len(c.tokens))
}

type prefixCache struct {
	o         CacheOptions
	vocab     int
	minShared int
	log       *slog.Logger

	mu      sync.Mutex
	entries map[string]*cacheEntry
	mem     int64 // bytes of states in memory
	// written and writtenBytes count the entries added and their bytes
	// (CacheStats): what the snapshot policy costs.
	written, writtenBytes int64
	disk                  int64 // bytes of files in Dir
	tick                  uint64

	writes chan *cacheEntry
	done   chan struct{}
}

func openPrefixCache(o CacheOptions, vocab int) (*prefixCache, error) {
	c := &prefixCache{o: o, vocab: vocab, minShared: o.MinShared, log: o.Logger, entries: map[string]*cacheEntry{}}
	if c.minShared <= 0 {
		c.minShared = DefaultMinShared
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if o.Dir == "" {
		return c, nil
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: prefix cache: %w", err)
	}
	if err := c.scan(); err != nil {
		return nil, err
	}
	c.writes = make(chan *cacheEntry, 16)
	c.done = make(chan struct{})
	go c.writer()
	return c, nil
}

// close waits for the queued disk writes.
func (c *prefixCache) close() error {
	if c.writes == nil {
		return nil
	}
	close(c.writes)
	<-c.done
	c.writes = nil
	return nil
}

func (c *prefixCache) warn(msg string, args ...any) { c.log.Warn(msg, args...) }

func tokensKey(tokens []int32) string {
	if len(tokens) == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*len(tokens)))
}

// CacheStats are the prefix cache's counters.
type CacheStats struct {
	Entries      int   // entries indexed now (memory or disk)
	MemBytes     int64 // bytes of states in memory now
	Written      int64 // entries added since the engine started
	WrittenBytes int64 // their bytes (state, logits, tokens)
}

func (c *prefixCache) stats() CacheStats {
	if c == nil {
		return CacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Entries: len(c.entries), MemBytes: c.mem, Written: c.written, WrittenBytes: c.writtenBytes}
}

// has reports an entry for exactly tokens.
func (c *prefixCache) has(tokens []int32) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[tokensKey(tokens)]
	return ok
}

// best is the longest entry that prompt starts with, longer than more
// tokens and usable for prompt (its logits known when it is all of it);
// c.mu held.
func (c *prefixCache) best(prompt []int32, more int) *cacheEntry {
	var b *cacheEntry
	for _, ent := range c.entries {
		n := len(ent.tokens)
		if n <= more || n > len(prompt) || (b != nil && n <= len(b.tokens)) {
			continue
		}
		if slices.Equal(ent.tokens, prompt[:n]) {
			b = ent
		}
	}
	return b
}

// peek is how many tokens of prompt the cache could restore.
func (c *prefixCache) peek(prompt []int32) int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.best(prompt, 0); b != nil {
		return len(b.tokens)
	}
	return 0
}

// shared is the longest prefix of prompt that an entry shares with it.
func (c *prefixCache) shared(prompt []int32) int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ent := range c.entries {
		n = max(n, commonPrefix(ent.tokens, prompt))
	}
	return n
}

// hit is a prefix cache entry as a lookup found it: its state in memory,
// whatever the cache does with the entry afterwards.
type hit struct {
	ent    *cacheEntry
	tokens []int32
	logits []float32
	state  []byte
}

// lookup returns the longest entry for prompt that covers more than more
// tokens, its state in memory (read from disk and checked if need be), or
// nil.
func (c *prefixCache) lookup(prompt []int32, more int) *hit {
	for {
		c.mu.Lock()
		ent := c.best(prompt, more)
		if ent == nil {
			c.mu.Unlock()
			return nil
		}
		c.tick++
		ent.used = c.tick
		if ent.state != nil {
			h := &hit{ent, ent.tokens, ent.logits, ent.state}
			c.mu.Unlock()
			return h
		}
		path := ent.path
		c.mu.Unlock()

		tokens, logits, state, err := readEntry(path, c.o.Fingerprint, c.vocab)
		if err == nil && !slices.Equal(tokens, ent.tokens) {
			err = errors.New("its tokens changed since it was indexed")
		}
		c.mu.Lock()
		if err != nil {
			c.warn("prefix cache: ignoring a file that does not check out", "file", path, "err", err)
			c.drop(ent)
			c.mu.Unlock()
			continue
		}
		if ent.state == nil && c.entries[ent.key] == ent {
			ent.logits, ent.state = logits, state
			c.mem += ent.memBytes()
			c.evict(ent)
		}
		now := time.Now()
		os.Chtimes(path, now, now) // the file's time is its last use across restarts
		c.mu.Unlock()
		return &hit{ent, tokens, logits, state}
	}
}

// remove forgets an entry and deletes its file.
func (c *prefixCache) remove(ent *cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ent.path != "" {
		os.Remove(ent.path)
	}
	c.drop(ent)
}

// drop forgets an entry (c.mu held); its file, if any, stays.
func (c *prefixCache) drop(ent *cacheEntry) {
	if c.entries[ent.key] != ent {
		return
	}
	delete(c.entries, ent.key)
	c.mem -= ent.memBytes()
	c.disk -= ent.disk
}

// add keeps a new entry, in memory as far as Mem allows and on disk when
// a directory is set.
func (c *prefixCache) add(tokens []int32, logits []float32, state []byte) {
	if len(logits) != c.vocab {
		return // every entry has the logits of its last token
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := tokensKey(tokens)
	if _, ok := c.entries[key]; ok {
		return
	}
	c.tick++
	ent := &cacheEntry{key: key, tokens: tokens, logits: logits, state: state, used: c.tick}
	if c.o.Dir == "" && ent.memBytes() > c.o.Mem {
		return // it would not stay
	}
	c.entries[key] = ent
	c.mem += ent.memBytes()
	c.written++
	c.writtenBytes += ent.memBytes()
	if c.writes != nil {
		select {
		case c.writes <- ent:
			ent.writing = true
		default:
			c.warn("prefix cache: disk writes are behind; an entry is not written", "tokens", len(tokens))
			if ent.memBytes() > c.o.Mem {
				c.drop(ent)
				return
			}
		}
	}
	c.evict(ent)
}

// evict drops states from memory, least recently used first, until they
// fit Mem; an entry with a file stays indexed, one without is forgotten.
// keep and entries the writer holds are not evicted (c.mu held).
func (c *prefixCache) evict(keep *cacheEntry) {
	if c.mem <= c.o.Mem {
		return
	}
	var inMem []*cacheEntry
	for _, ent := range c.entries {
		if ent.state != nil && ent != keep && !ent.writing {
			inMem = append(inMem, ent)
		}
	}
	sort.Slice(inMem, func(i, j int) bool { return inMem[i].used < inMem[j].used })
	for _, ent := range inMem {
		if c.mem <= c.o.Mem {
			return
		}
		if ent.path == "" {
			c.drop(ent)
			continue
		}
		c.mem -= ent.memBytes()
		ent.state = nil
	}
	if c.mem > c.o.Mem && keep != nil && keep.path != "" && !keep.writing {
		c.mem -= keep.memBytes()
		keep.state = nil
	}
}

// writer writes queued entries to disk, one at a time.
func (c *prefixCache) writer() {
	defer close(c.done)
	for ent := range c.writes {
		c.mu.Lock()
		tokens, logits, state := ent.tokens, ent.logits, ent.state
		c.mu.Unlock()
		path := filepath.Join(c.o.Dir, entryName(c.o.Fingerprint, tokens))
		size, err := writeEntry(path, c.o.Fingerprint, tokens, logits, state)
		c.mu.Lock()
		ent.writing = false
		if err != nil {
			c.warn("prefix cache: cannot write an entry", "dir", c.o.Dir, "err", err)
		} else if c.entries[ent.key] == ent {
			ent.path, ent.disk = path, size
			c.disk += size
			c.trimDisk(ent)
		} else {
			os.Remove(path) // forgotten while it was written
		}
		c.evict(nil)
		c.mu.Unlock()
	}
}

// trimDisk deletes files, least recently used first, until they fit
// DiskMax; newest goes last (c.mu held).
func (c *prefixCache) trimDisk(newest *cacheEntry) {
	if c.o.DiskMax <= 0 || c.disk <= c.o.DiskMax {
		return
	}
	var onDisk []*cacheEntry
	for _, ent := range c.entries {
		if ent.path != "" && ent != newest {
			onDisk = append(onDisk, ent)
		}
	}
	sort.Slice(onDisk, func(i, j int) bool { return onDisk[i].used < onDisk[j].used })
	onDisk = append(onDisk, newest)
	for _, ent := range onDisk {
		if c.disk <= c.o.DiskMax {
			return
		}
		os.Remove(ent.path)
		c.disk -= ent.disk
		ent.path, ent.disk = "", 0
		if ent.state == nil {
			c.drop(ent)
		}
	}
}

// The file of an entry:
//
//	"K3PREFIX" version:u32 fingerprint:[32] n:u32 n × token:u32
//	v:u32 v × logit:f32 s:u64 s × state byte  sha256 of all before:[32]
const (
	entryMagic   = "K3PREFIX"
	entryVersion = 1
	entryExt     = ".k3prefix"
	entryTmp     = ".k3prefix-tmp-"
	maxTokens    = 1 << 24
)

func entryName(fp [32]byte, tokens []int32) string {
	h := sha256.New()
	h.Write(fp[:])
	h.Write([]byte(tokensKey(tokens)))
	return hex.EncodeToString(h.Sum(nil)[:20]) + entryExt
}

// writeEntry writes an entry atomically: a temporary file in the same
// directory, synced, renamed over path, the directory synced.
func writeEntry(path string, fp [32]byte, tokens []int32, logits []float32, state []byte) (int64, error) {
	b := make([]byte, 0, 64+4*len(tokens)+4*len(logits)+len(state))
	b = append(b, entryMagic...)
	b = binary.LittleEndian.AppendUint32(b, entryVersion)
	b = append(b, fp[:]...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(tokens)))
	for _, t := range tokens {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(logits)))
	for _, v := range logits {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(len(state)))
	b = append(b, state...)
	sum := sha256.Sum256(b)
	b = append(b, sum[:]...)

	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, entryTmp+"*")
	if err != nil {
		return 0, err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return int64(len(b)), nil
}

// errForeign marks a file another model wrote.
var errForeign = errors.New("it was written for another model file (fingerprint differs)")

// readHeader reads an entry file's tokens after checking its magic,
// version and fingerprint (not yet its checksum).
func readHeader(r io.Reader, fp [32]byte) ([]int32, error) {
	var h [8 + 4 + 32 + 4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if string(h[:8]) != entryMagic {
		return nil, errors.New("not a prefix cache entry (bad magic)")
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != entryVersion {
		return nil, fmt.Errorf("version %d, want %d", v, entryVersion)
	}
	if !bytes.Equal(h[12:44], fp[:]) {
		return nil, errForeign
	}
	n := binary.LittleEndian.Uint32(h[44:])
	if n == 0 || n > maxTokens {
		return nil, fmt.Errorf("%d tokens", n)
	}
	raw := make([]byte, 4*int(n))
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	tokens := make([]int32, n)
	for i := range tokens {
		tokens[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return tokens, nil
}

// readEntry reads and checks a whole entry file: checksum, fingerprint,
// logits of the model's vocabulary.
func readEntry(path string, fp [32]byte, vocab int) ([]int32, []float32, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(b) < sha256.Size {
		return nil, nil, nil, errors.New("truncated")
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, nil, nil, errors.New("checksum mismatch (truncated or corrupted)")
	}
	r := bytes.NewReader(body)
	tokens, err := readHeader(r, fp)
	if err != nil {
		return nil, nil, nil, err
	}
	rest := body[len(body)-r.Len():]
	if len(rest) < 4 {
		return nil, nil, nil, errors.New("truncated logits")
	}
	nl := int(binary.LittleEndian.Uint32(rest))
	if nl != vocab {
		return nil, nil, nil, fmt.Errorf("%d logits for a vocabulary of %d", nl, vocab)
	}
	rest = rest[4:]
	if len(rest) < 4*nl+8 {
		return nil, nil, nil, errors.New("truncated logits")
	}
	logits := make([]float32, nl)
	for i := range logits {
		logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(rest[4*i:]))
	}
	rest = rest[4*nl:]
	ns := binary.LittleEndian.Uint64(rest)
	rest = rest[8:]
	if uint64(len(rest)) != ns {
		return nil, nil, nil, fmt.Errorf("state of %d bytes where the header says %d", len(rest), ns)
	}
	return tokens, logits, slices.Clone(rest), nil
}

// scan indexes the entry files in Dir: their tokens and sizes, the
// least recently used by modification time. Files that are not entries of
// this model are ignored with a warning; leftover temporary files are
// removed.
func (c *prefixCache) scan() error {
	des, err := os.ReadDir(c.o.Dir)
	if err != nil {
		return fmt.Errorf("engine: prefix cache: %w", err)
	}
	type found struct {
		ent  *cacheEntry
		time time.Time
	}
	var all []found
	for _, de := range des {
		name := de.Name()
		path := filepath.Join(c.o.Dir, name)
		if strings.HasPrefix(name, entryTmp) {
			os.Remove(path)
			continue
		}
		if !strings.HasSuffix(name, entryExt) || !de.Type().IsRegular() {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			c.warn("prefix cache: ignoring a file", "file", path, "err", err)
			continue
		}
		tokens, err := readHeader(f, c.o.Fingerprint)
		f.Close()
		if err != nil {
			c.warn("prefix cache: ignoring a file", "file", path, "err", err)
			continue
		}
		ent := &cacheEntry{key: tokensKey(tokens), tokens: tokens, path: path, disk: info.Size()}
		all = append(all, found{ent, info.ModTime()})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].time.Before(all[j].time) })
	for _, f := range all {
		if _, dup := c.entries[f.ent.key]; dup {
			continue
		}
		c.tick++
		f.ent.used = c.tick
		c.entries[f.ent.key] = f.ent
		c.disk += f.ent.disk
	}
	return nil
}
