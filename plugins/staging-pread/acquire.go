package stagingpread

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/k3-inference/k3/core/plugin"
	"github.com/k3-inference/k3/core/plugin/cache"
	"github.com/k3-inference/k3/core/plugin/readq"
)

// Hint queues reads for experts of a layer (readq: current hints before
// guesses, stale ones dropped).
func (s *Stager) Hint(_ context.Context, req *plugin.HintRequest) error {
	n, ok := s.lay.experts[req.Layer]
	if !ok {
		return fmt.Errorf("staging-pread: hint: layer %d has no routed tensors", req.Layer)
	}
	for _, e := range req.Experts {
		if e < 0 || e >= n {
			return fmt.Errorf("staging-pread: hint: layer %d has %d experts, not %d", req.Layer, n, e)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	owner := s.unitDev[req.Layer]
	for _, d := range s.devs {
		if d != owner {
			// What the hint shows stale is stale on every device.
			d.queue.DropStale(req.Layer, req.Experts, req.Speculative)
		}
	}
	owner.queue.Hint(req.Layer, req.Experts, req.Speculative, func(k cache.Key) bool {
		_, ok := s.cache.Peek(k)
		return ok
	})
	owner.work.Broadcast()
	return nil
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

// worker reads units queued on d, highest priority first.
func (s *Stager) worker(d *device) {
	defer s.wg.Done()
	for {
		j, hinted, ok := s.next(d)
		if !ok {
			return
		}
		u := j.Entry.Value.(*unit)
		var err error
		for _, p := range s.lay.unitParts(s.req, int(j.Key.Layer), int(j.Key.Expert), s.slotBase(j.Entry.Slot)) {
			if err = s.read(p); err != nil {
				break
			}
		}
		s.mu.Lock()
		u.err = err
		close(u.done)
		s.inflight--
		switch {
		case err != nil:
			j.Entry.Pins--
			s.cache.Remove(j.Key)
			s.free = append(s.free, j.Entry.Slot)
		case hinted:
			// The read's pin stays until the model reaches the layer
			// (cache.Holds): else the next insertion evicts it first.
			s.holds.Add(j.Entry)
		default:
			j.Entry.Pins--
		}
		s.loaded.Broadcast()
		s.mu.Unlock()
	}
}

// next pops the most urgent job that still needs a read, giving hint jobs
// a slot; hinted says it is a hint's. It returns false when the stager is
// closing.
func (s *Stager) next(d *device) (j readq.Job, hinted, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for !s.closing && d.queue.Len() == 0 {
			d.work.Wait()
		}
		if s.closing {
			return readq.Job{}, false, false
		}
		j, _, _ = d.queue.Pop()
		if j.Entry != nil {
			return j, false, true
		}
		if _, ok := s.cache.Peek(j.Key); ok {
			continue // already resident or being read
		}
		e, err := s.insert(j.Key)
		if err != nil {
			continue // no unpinned slot: drop the prefetch
		}
		j.Entry = e
		return j, true, true
	}
}

func (s *Stager) slotBase(slot int) int64 { return s.lay.residentSize + int64(slot)*s.lay.slotSize }

// Acquire pins every slice's unit for req.Step, queues reads for the
// missing ones ahead of all prefetches, and waits for them. The slices a
// Partial request does not wait for are pinned only if their unit is read
// already; the others are left pending, their reads as hinted.
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
		k := cache.Key{Layer: int32(t.Layer), Expert: int32(sl.Expert)}
		if !req.Waited(i) && !s.ready(k) {
			resp.Pending = append(resp.Pending, i)
			continue
		}
		e, err := s.lookup(k)
		if err != nil {
			s.unpin(pinned)
			s.mu.Unlock()
			return nil, fmt.Errorf("staging-pread: acquire step %d: %w", req.Step, err)
		}
		e.Pins++
		s.holds.Take(e) // the step's pin replaces the hint read's hold
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
	if layer := s.req.RoutedLayer(req.Slices); layer >= 0 && s.holds.Reached(layer) {
		s.loaded.Broadcast()
	}
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

// ready reports whether k's bytes are in its slot. The caller holds s.mu.
func (s *Stager) ready(k cache.Key) bool {
	e, ok := s.cache.Peek(k)
	if !ok {
		return false
	}
	select {
	case <-e.Value.(*unit).done:
		return true // a failed read leaves the cache under s.mu
	default:
		return false
	}
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
			d := s.unitDev[int(k.Layer)]
			d.queue.Demand(readq.Job{Key: k, Entry: e})
			d.work.Signal()
			return e, nil
		}
		if errors.Is(err, cache.ErrFull) && s.holds.ReleaseAll() {
			continue
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
