package stagingmmap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/cache"
)

// unitSpans are the page-aligned ranges of expert e's slices of every
// routed tensor of layer.
func (s *Stager) unitSpans(layer, e int) []span {
	var out []span
	for _, id := range s.routed[layer] {
		t := s.req.Tensors[id]
		if e >= t.Experts {
			continue
		}
		off := t.Offset + int64(e)*t.ExpertSize
		out = append(out, span{t.Shard, pageDown(off), pageUp(off + t.ExpertSize)})
	}
	return out
}

func (s *Stager) unitBytes(k cache.Key) int64 {
	var n int64
	for _, sp := range s.unitSpans(int(k.Layer), int(k.Expert)) {
		n += sp.size()
	}
	return n
}

// insert accounts for k in the budget, dropping evicted units from the
// page cache. The caller holds s.mu.
func (s *Stager) insert(k cache.Key) (*cache.Entry, error) {
	e, evicted, err := s.cache.Insert(k, s.unitBytes(k))
	if err != nil {
		return nil, err
	}
	for _, v := range evicted {
		s.dropUnit(v.Key)
	}
	return e, nil
}

// dropUnit drops unit k's pages; if some stay cached, Release tries again.
// The caller holds s.mu.
func (s *Stager) dropUnit(k cache.Key) {
	left := false
	for _, sp := range s.unitSpans(int(k.Layer), int(k.Expert)) {
		left = s.drop(sp) || left
	}
	if left {
		s.undropped[k] = true
	} else {
		delete(s.undropped, k)
	}
}

// redrop drops again the evicted units whose pages stayed cached, unless
// they are cached (and so counted) again. The caller holds s.mu.
func (s *Stager) redrop() {
	for k := range s.undropped {
		if _, ok := s.cache.Peek(k); ok {
			delete(s.undropped, k)
			continue
		}
		s.dropUnit(k)
	}
}

// Hint queues the reads of a layer's experts (readq: current hints before
// guesses, stale ones dropped) and returns.
func (s *Stager) Hint(_ context.Context, req *plugin.HintRequest) error {
	n, ok := s.experts[req.Layer]
	if !ok {
		return fmt.Errorf("staging-mmap: hint: layer %d has no routed tensors", req.Layer)
	}
	for _, e := range req.Experts {
		if e < 0 || e >= n {
			return fmt.Errorf("staging-mmap: hint: layer %d has %d experts, not %d", req.Layer, n, e)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue.Hint(req.Layer, req.Experts, req.Speculative, func(k cache.Key) bool {
		_, ok := s.cache.Peek(k)
		return ok
	})
	s.work.Broadcast()
	return nil
}

// worker reads hinted units, most urgent first, one at a time: each of
// the workers has one unit's reads in flight.
func (s *Stager) worker() {
	defer s.wg.Done()
	for {
		k, e, ok := s.next()
		if !ok {
			return
		}
		beforeRead(k)
		s.fetchAll(s.unitSpans(int(k.Layer), int(k.Expert)))
		s.mu.Lock()
		close(s.loading[k])
		delete(s.loading, k)
		s.inflight--
		// The read's pin stays as a hold until the model reaches the
		// layer (Acquire): freshly read units rank lowest in the cache
		// and would otherwise be the next read's victims.
		s.holds.Add(e)
		s.unpinned.Broadcast()
		s.mu.Unlock()
	}
}

// beforeRead is called by a worker with each unit it is about to read;
// tests use it to see and hold the reads.
var beforeRead = func(cache.Key) {}

// next pops the most urgent hinted unit that has no cache entry yet and
// makes room for it. The unit stays pinned until its pages are resident:
// unpinned while a read is in flight, an eviction could not drop the
// pages (the kernel skips pages under I/O) and they would arrive
// unaccounted. It returns false when the stager is closing.
func (s *Stager) next() (cache.Key, *cache.Entry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for !s.closing && s.queue.Len() == 0 {
			s.work.Wait()
		}
		if s.closing {
			return cache.Key{}, nil, false
		}
		j, _, _ := s.queue.Pop()
		if _, ok := s.cache.Peek(j.Key); ok {
			continue // cached, or an Acquire or another worker is reading it
		}
		e, err := s.insert(j.Key)
		if err != nil {
			continue // no unpinned room: skip this expert
		}
		e.Pins++
		s.inflight++
		s.loading[j.Key] = make(chan struct{})
		return j.Key, e, true
	}
}

// Acquire pins the slices' units within the budget, then faults in
// whatever of them is not in the page cache. The slices a Partial request
// does not wait for are pinned only if their pages are cached and no read
// of their unit is under way; the others are left pending.
func (s *Stager) Acquire(_ context.Context, req *plugin.AcquireRequest) (*plugin.AcquireResponse, error) {
	if s.maps == nil {
		return nil, errors.New("staging-mmap: not open")
	}
	if err := s.req.CheckSlices(req.Slices); err != nil {
		return nil, fmt.Errorf("staging-mmap: %w", err)
	}
	resp := &plugin.AcquireResponse{Locations: make([]plugin.Location, len(req.Slices))}
	var pinned []*cache.Entry
	var fetch []span
	var loads []chan struct{}
	var reading []cache.Key // units this Acquire reads: others wait for them
	s.mu.Lock()
	for i, sl := range req.Slices {
		t := s.req.Tensors[sl.Tensor]
		if !t.Routed() {
			resp.Locations[i] = plugin.Location{Region: t.Shard, Offset: t.Offset, Size: t.Size}
			continue
		}
		k := cache.Key{Layer: int32(t.Layer), Expert: int32(sl.Expert)}
		off := t.Offset + int64(sl.Expert)*t.ExpertSize
		sp := span{t.Shard, pageDown(off), pageUp(off + t.ExpertSize)}
		if !req.Waited(i) && !s.ready(k, sp, reading) {
			resp.Pending = append(resp.Pending, i)
			continue
		}
		e, err := s.lookup(k)
		if err != nil {
			s.unpin(pinned)
			s.mu.Unlock()
			return nil, fmt.Errorf("staging-mmap: acquire step %d: %w (budget %d bytes)", req.Step, err, s.req.Budget)
		}
		e.Pins++
		s.holds.Take(e) // the step's pin replaces the hint read's hold
		pinned = append(pinned, e)
		if slices.Contains(reading, k) {
			// Another tensor of a unit this Acquire reads.
			s.stats.Misses++
			fetch = append(fetch, sp)
		} else if ch, ok := s.loading[k]; ok {
			// A read is under way: wait for it, then fault in whatever
			// it left (nothing, unless the read failed).
			s.stats.Misses++
			loads = append(loads, ch)
			fetch = append(fetch, sp)
		} else if s.missing(sp) > 0 {
			s.stats.Misses++
			fetch = append(fetch, sp)
			reading = append(reading, k)
			s.loading[k] = make(chan struct{})
		} else {
			s.stats.Hits++
		}
		resp.Locations[i] = plugin.Location{Region: t.Shard, Offset: off, Size: t.ExpertSize}
	}
	s.pins[req.Step] = append(s.pins[req.Step], pinned...)
	if layer := s.req.RoutedLayer(req.Slices); layer >= 0 && s.holds.Reached(layer) {
		s.unpinned.Broadcast()
	}
	s.mu.Unlock()

	start := time.Now()
	for _, ch := range loads {
		<-ch
	}
	waited := time.Duration(0)
	if len(loads) > 0 {
		waited = time.Since(start)
	}
	d := s.fetchAll(fetch) + waited
	s.mu.Lock()
	s.stats.WaitTime += d
	for _, k := range reading {
		close(s.loading[k])
		delete(s.loading, k)
	}
	s.mu.Unlock()
	return resp, nil
}

// ready reports whether unit k is accounted for, not being read, and
// sp's pages cached. The caller holds s.mu.
func (s *Stager) ready(k cache.Key, sp span, reading []cache.Key) bool {
	if _, ok := s.cache.Peek(k); !ok {
		return false
	}
	if _, ok := s.loading[k]; ok || slices.Contains(reading, k) {
		return false
	}
	return s.missing(sp) == 0
}

// lookup finds or inserts k; when the cache is full of pins it gives up
// the hint reads' holds, then waits for reads in flight, rather than
// fail. The caller holds s.mu.
func (s *Stager) lookup(k cache.Key) (*cache.Entry, error) {
	for {
		if e, ok := s.cache.Get(k); ok {
			return e, nil
		}
		e, err := s.insert(k)
		if err == nil || !errors.Is(err, cache.ErrFull) {
			return e, err
		}
		if s.holds.ReleaseAll() {
			continue
		}
		if s.inflight == 0 {
			return nil, err
		}
		s.unpinned.Wait()
	}
}

func (s *Stager) unpin(es []*cache.Entry) {
	for _, e := range es {
		e.Pins--
	}
}

// Release unpins everything acquired for the step.
func (s *Stager) Release(_ context.Context, req *plugin.ReleaseRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unpin(s.pins[req.Step])
	delete(s.pins, req.Step)
	s.redrop()
	return nil
}
