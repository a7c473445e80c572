package stagingpread

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/cache"
)

// Priorities of queued reads: what a blocked Acquire needs, then experts of
// layers already routed, then guesses.
const (
	prioDemand = iota
	prioCurrent
	prioSpeculative
)

// job is one unit to read. Demand jobs come with their entry already in
// the cache; hint jobs get one when a worker picks them up, if there is room.
type job struct {
	key   cache.Key
	entry *cache.Entry
}

// Hint queues reads for experts of a layer.
func (s *Stager) Hint(_ context.Context, req *plugin.HintRequest) error {
	n, ok := s.lay.experts[req.Layer]
	if !ok {
		return fmt.Errorf("staging-pread: hint: layer %d has no routed tensors", req.Layer)
	}
	prio := prioCurrent
	if req.Speculative {
		prio = prioSpeculative
	}
	for _, e := range req.Experts {
		if e < 0 || e >= n {
			return fmt.Errorf("staging-pread: hint: layer %d has %d experts, not %d", req.Layer, n, e)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropStale(req.Layer, req.Experts, req.Speculative)
	for _, e := range req.Experts {
		k := cache.Key{Layer: int32(req.Layer), Expert: int32(e)}
		if _, ok := s.cache.Peek(k); ok {
			continue
		}
		if q, ok := s.queued[k]; ok && q <= prio {
			continue
		}
		s.queued[k] = prio
		s.queue[prio] = append(s.queue[prio], job{key: k})
	}
	s.work.Broadcast()
	return nil
}

// dropStale forgets queued hint reads that a hint of layer shows to be of
// no use. A current hint: guesses for its layer it did not choose, and
// any hint for an earlier layer (the model is past it). A speculative
// one: the layer's earlier guesses it does not repeat (the model guesses
// a layer again, from fresher state, as it comes nearer). Read anyway,
// they would take bandwidth from the reads the model waits for and evict
// cached experts to make room; when the model needs them it hints them
// again. Guesses for later layers stay. A layer the model hints in parts
// drops its other parts' guesses too; they come back as the current hints
// of those parts. The caller holds s.mu.
func (s *Stager) dropStale(layer int, chosen []int, speculative bool) {
	keep := make(map[int32]bool, len(chosen))
	for _, e := range chosen {
		keep[int32(e)] = true
	}
	for _, p := range []int{prioCurrent, prioSpeculative} {
		q := s.queue[p][:0]
		for _, j := range s.queue[p] {
			l := int(j.key.Layer)
			stale := p == prioSpeculative && l == layer && !keep[j.key.Expert]
			if !speculative && l < layer {
				stale = true
			}
			if !stale || j.entry != nil {
				q = append(q, j)
				continue
			}
			if s.queued[j.key] == p {
				delete(s.queued, j.key)
			}
		}
		clear(s.queue[p][len(q):])
		s.queue[p] = q
	}
}

// insert makes room for k and gives it a slot, pinned for its read. The
// caller holds s.mu.
func (s *Stager) insert(k cache.Key) (*cache.Entry, error) {
	e, evicted, err := s.cache.Insert(k, s.lay.slotSize)
	if err != nil {
		return nil, err
	}
	for _, v := range evicted {
		s.free = append(s.free, v.Slot)
	}
	e.Slot = s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	e.Value = &unit{done: make(chan struct{})}
	e.Pins++
	s.inflight++
	return e, nil
}

// worker reads queued units, highest priority first.
func (s *Stager) worker() {
	defer s.wg.Done()
	for {
		j, ok := s.next()
		if !ok {
			return
		}
		u := j.entry.Value.(*unit)
		var err error
		for _, p := range s.lay.unitParts(s.req, int(j.key.Layer), int(j.key.Expert), s.slotBase(j.entry.Slot)) {
			if err = s.read(p); err != nil {
				break
			}
		}
		s.mu.Lock()
		u.err = err
		close(u.done)
		j.entry.Pins--
		s.inflight--
		if err != nil {
			s.cache.Remove(j.key)
			s.free = append(s.free, j.entry.Slot)
		}
		s.loaded.Broadcast()
		s.mu.Unlock()
	}
}

// next pops the most urgent job that still needs a read, giving hint jobs
// a slot. It returns false when the stager is closing.
func (s *Stager) next() (job, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for !s.closing && len(s.queue[0])+len(s.queue[1])+len(s.queue[2]) == 0 {
			s.work.Wait()
		}
		if s.closing {
			return job{}, false
		}
		for p := range s.queue {
			if len(s.queue[p]) == 0 {
				continue
			}
			j := s.queue[p][0]
			s.queue[p] = s.queue[p][1:]
			if j.entry != nil {
				return j, true
			}
			if q, ok := s.queued[j.key]; ok && q == p {
				delete(s.queued, j.key)
			}
			if _, ok := s.cache.Peek(j.key); ok {
				break // already resident or being read
			}
			e, err := s.insert(j.key)
			if err != nil {
				break // no unpinned slot: drop the prefetch
			}
			j.entry = e
			return j, true
		}
	}
}

func (s *Stager) slotBase(slot int) int64 { return s.lay.residentSize + int64(slot)*s.lay.slotSize }

// Acquire pins every slice's unit for req.Step, queues reads for the
// missing ones ahead of all prefetches, and waits for them.
func (s *Stager) Acquire(ctx context.Context, req *plugin.AcquireRequest) (*plugin.AcquireResponse, error) {
	if s.file == nil {
		return nil, errors.New("staging-pread: not open")
	}
	if err := s.req.CheckSlices(req.Slices); err != nil {
		return nil, fmt.Errorf("staging-pread: %w", err)
	}
	resp := &plugin.AcquireResponse{Locations: make([]plugin.Location, len(req.Slices))}
	var pinned []*cache.Entry
	var waits []*unit
	s.mu.Lock()
	for i, sl := range req.Slices {
		t := s.req.Tensors[sl.Tensor]
		if !t.Routed() {
			p := s.lay.resident[sl.Tensor]
			resp.Locations[i] = plugin.Location{Offset: p.memOff + p.inner, Size: t.Size}
			continue
		}
		e, err := s.lookup(cache.Key{Layer: int32(t.Layer), Expert: int32(sl.Expert)})
		if err != nil {
			s.unpin(pinned)
			s.mu.Unlock()
			return nil, fmt.Errorf("staging-pread: acquire step %d: %w", req.Step, err)
		}
		e.Pins++
		pinned = append(pinned, e)
		u := e.Value.(*unit)
		select {
		case <-u.done:
			s.stats.Hits++
		default:
			s.stats.Misses++
			waits = append(waits, u)
		}
		off := t.Offset + int64(sl.Expert)*t.ExpertSize
		resp.Locations[i] = plugin.Location{Offset: s.slotBase(e.Slot) + s.lay.partOff[sl.Tensor] + off - alignDown(off), Size: t.ExpertSize}
	}
	s.pins[req.Step] = append(s.pins[req.Step], pinned...)
	s.mu.Unlock()

	if err := s.wait(ctx, waits); err != nil {
		s.mu.Lock()
		s.unpin(pinned)
		s.pins[req.Step] = without(s.pins[req.Step], pinned)
		s.mu.Unlock()
		return nil, fmt.Errorf("staging-pread: acquire step %d: %w", req.Step, err)
	}
	return resp, nil
}

// lookup finds k in the cache or inserts it and queues its read first in
// line. When every slot is pinned but reads are in flight it waits for them
// to finish; with none in flight the step cannot fit the budget. The caller
// holds s.mu.
func (s *Stager) lookup(k cache.Key) (*cache.Entry, error) {
	for {
		if e, ok := s.cache.Get(k); ok {
			return e, nil
		}
		e, err := s.insert(k)
		if err == nil {
			s.queue[prioDemand] = append(s.queue[prioDemand], job{key: k, entry: e})
			s.work.Signal()
			return e, nil
		}
		if !errors.Is(err, cache.ErrFull) || s.inflight == 0 || s.closing {
			return nil, fmt.Errorf("%w (budget %d bytes: %d expert slots of %d bytes)", err, s.req.Budget, s.slots, s.lay.slotSize)
		}
		s.loaded.Wait()
	}
}

// wait blocks until every unit is read, counting the time as waiting on
// storage.
func (s *Stager) wait(ctx context.Context, units []*unit) error {
	if len(units) == 0 {
		return nil
	}
	start := time.Now()
	defer func() {
		d := time.Since(start)
		s.mu.Lock()
		s.stats.WaitTime += d
		s.mu.Unlock()
	}()
	for _, u := range units {
		select {
		case <-u.done:
			if u.err != nil {
				return u.err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return errors.New("stager closed")
		}
	}
	return nil
}

func (s *Stager) unpin(es []*cache.Entry) {
	for _, e := range es {
		e.Pins--
	}
	s.loaded.Broadcast()
}

// Release unpins everything acquired for the step.
func (s *Stager) Release(_ context.Context, req *plugin.ReleaseRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unpin(s.pins[req.Step])
	delete(s.pins, req.Step)
	return nil
}

// without removes one occurrence of each of drop from es.
func without(es, drop []*cache.Entry) []*cache.Entry {
	n := map[*cache.Entry]int{}
	for _, e := range drop {
		n[e]++
	}
	out := es[:0]
	for _, e := range es {
		if n[e] > 0 {
			n[e]--
			continue
		}
		out = append(out, e)
	}
	return out
}
