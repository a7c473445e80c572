// Package cache is the bookkeeping of a stager's expert cache: which units
// are resident, which are pinned, and which to evict next. Stagers keep the
// bytes; this package only decides. It is not safe for concurrent use; the
// stager holds its own lock around it.
package cache

import (
	"errors"
	"fmt"
	"math"
)

// Key names a cache unit: every routed tensor's slice for one expert of one
// layer, read and evicted together.
type Key struct {
	Layer, Expert int32
}

func (k Key) String() string { return fmt.Sprintf("L%d/E%d", k.Layer, k.Expert) }

// Entry is a resident (or loading) unit.
type Entry struct {
	Key  Key
	Size int64
	// Pins counts users that must not see the unit evicted: acquired steps,
	// and the reader while the bytes are in flight.
	Pins int
	// Slot and Value are the stager's: where the bytes are.
	Slot  int
	Value any

	*Usage
}

// Usage is a unit's access history. The cache keeps it after eviction:
// with a working set larger than the cache, a unit is evicted before its
// second use, and a policy that forgot it could never learn it is popular.
type Usage struct {
	Last  uint64  // tick of the last access
	Score float64 // the policy's state
}

// Policy ranks entries for eviction.
type Policy interface {
	Name() string
	// Touch records an access at tick now.
	Touch(u *Usage, now uint64)
	// Rank is the value of a unit at tick now: the lowest is evicted first.
	Rank(u *Usage, now uint64) float64
}

// LRU evicts the least recently used entry. It collapses when one token's
// working set is larger than the cache: every unit is evicted just before it
// is needed again.
type LRU struct{}

func (LRU) Name() string                      { return "lru" }
func (LRU) Touch(u *Usage, now uint64)        { u.Last = now }
func (LRU) Rank(u *Usage, now uint64) float64 { return float64(u.Last) }

// LFRU ranks by an exponentially decayed access count (the LRFU family):
// each access adds 1, and the count halves every HalfLife ticks. A unit the
// router picks often stays even if it was not used in the last pass through
// the layers; one used once long ago goes first. With HalfLife→0 it is LRU,
// with HalfLife→∞ LFU.
type LFRU struct {
	HalfLife float64
}

func (p LFRU) Name() string { return "lfru" }

func (p LFRU) Touch(u *Usage, now uint64) {
	u.Score = p.Rank(u, now) + 1
	u.Last = now
}

func (p LFRU) Rank(u *Usage, now uint64) float64 {
	return u.Score * math.Exp2(-float64(now-u.Last)/p.HalfLife)
}

// NewPolicy returns the policy called name ("lfru" or "lru"); halfLife is
// LFRU's in ticks.
func NewPolicy(name string, halfLife float64) (Policy, error) {
	switch name {
	case "", "lfru":
		return LFRU{HalfLife: max(halfLife, 1)}, nil
	case "lru":
		return LRU{}, nil
	}
	return nil, fmt.Errorf("cache: unknown policy %q (lfru, lru)", name)
}

// ErrFull means every entry is pinned and the new one does not fit.
var ErrFull = errors.New("cache: full of pinned entries")

// Cache tracks entries within a capacity in bytes.
type Cache struct {
	capacity, used int64
	policy         Policy
	entries        map[Key]*Entry
	history        map[Key]*Usage
	now            uint64
	evictions      uint64
}

// New returns an empty cache of capacity bytes.
func New(capacity int64, p Policy) *Cache {
	return &Cache{capacity: capacity, policy: p, entries: map[Key]*Entry{}, history: map[Key]*Usage{}}
}

// Get returns the entry for k and records an access.
func (c *Cache) Get(k Key) (*Entry, bool) {
	e, ok := c.entries[k]
	if ok {
		c.now++
		c.policy.Touch(e.Usage, c.now)
	}
	return e, ok
}

// Peek returns the entry for k without recording an access.
func (c *Cache) Peek(k Key) (*Entry, bool) {
	e, ok := c.entries[k]
	return e, ok
}

// Insert adds k with size bytes, evicting unpinned entries in policy order
// until it fits; the evicted entries are returned so the stager can reuse
// or drop their memory. With ErrFull nothing was evicted.
func (c *Cache) Insert(k Key, size int64) (*Entry, []*Entry, error) {
	if _, ok := c.entries[k]; ok {
		return nil, nil, fmt.Errorf("cache: %s inserted twice", k)
	}
	if size > c.capacity {
		return nil, nil, fmt.Errorf("cache: %s is %d bytes, capacity %d", k, size, c.capacity)
	}
	var free int64
	for _, e := range c.entries {
		if e.Pins == 0 {
			free += e.Size
		}
	}
	if c.capacity-c.used+free < size {
		return nil, nil, fmt.Errorf("%w: %s needs %d bytes, %d of %d are pinned", ErrFull, k, size, c.used-free, c.capacity)
	}
	var evicted []*Entry
	for c.capacity-c.used < size {
		v := c.victim()
		c.remove(v)
		c.evictions++
		evicted = append(evicted, v)
	}
	u, ok := c.history[k]
	if !ok {
		u = &Usage{}
		c.history[k] = u
	}
	e := &Entry{Key: k, Size: size, Usage: u}
	c.entries[k] = e
	c.used += size
	c.now++
	c.policy.Touch(u, c.now)
	return e, evicted, nil
}

// victim is the unpinned entry of lowest rank. The caller made sure one
// exists.
func (c *Cache) victim() *Entry {
	var best *Entry
	var bestRank float64
	for _, e := range c.entries {
		if e.Pins > 0 {
			continue
		}
		r := c.policy.Rank(e.Usage, c.now)
		if best == nil || r < bestRank || (r == bestRank && e.Last < best.Last) {
			best, bestRank = e, r
		}
	}
	return best
}

// Victim reports the entry Insert would evict next, if any.
func (c *Cache) Victim() (*Entry, bool) {
	for _, e := range c.entries {
		if e.Pins == 0 {
			return c.victim(), true
		}
	}
	return nil, false
}

// Remove drops k (e.g. after a failed read).
func (c *Cache) Remove(k Key) {
	if e, ok := c.entries[k]; ok {
		c.remove(e)
	}
}

func (c *Cache) remove(e *Entry) {
	delete(c.entries, e.Key)
	c.used -= e.Size
}

// Used is the bytes of all entries; Capacity the limit.
func (c *Cache) Used() int64     { return c.used }
func (c *Cache) Capacity() int64 { return c.capacity }

// Len is the number of entries.
func (c *Cache) Len() int { return len(c.entries) }

// Evictions counts entries evicted by Insert.
func (c *Cache) Evictions() uint64 { return c.evictions }

// Entries calls fn for every entry, in no order.
func (c *Cache) Entries(fn func(*Entry)) {
	for _, e := range c.entries {
		fn(e)
	}
}
