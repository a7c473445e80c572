package stagingmmap

import (
	"context"
	"errors"
	"fmt"
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
		for _, sp := range s.unitSpans(int(v.Key.Layer), int(v.Key.Expert)) {
			s.drop(sp)
		}
	}
	return e, nil
}

// hint is a queued HintRequest and where the model was when it came.
type hint struct {
	plugin.HintRequest
	at hintPos
}

// hintPos orders hints: pass, then layer, then arrival.
type hintPos struct {
	pass, layer, seq int
}

// Hint queues readahead of a layer's experts and returns; current hints
// are served before speculative ones.
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
	s.pos.seq++
	q := s.current
	if req.Speculative {
		q = s.spec
		s.guessed[req.Layer] = s.pos
	} else {
		if req.Layer < s.pos.layer {
			s.pos.pass++
		}
		s.pos.layer = req.Layer
	}
	h := hint{*req, s.pos}
	s.mu.Unlock()
	select {
	case q <- h:
	default: // a whole queue behind: drop this hint
	}
	return nil
}

// stale reports whether h is of no use any more: a hint of a layer the
// model is past or has reached (its current hint covers what it chose),
// or a guess a later guess for the same layer replaces. Read anyway, it
// would take the disk from the reads the model waits for and evict cached
// experts. The caller holds s.mu.
func (s *Stager) stale(h hint) bool {
	if h.at.pass < s.pos.pass {
		return true
	}
	if !h.Speculative {
		return h.Layer < s.pos.layer
	}
	return h.Layer <= s.pos.layer || s.guessed[h.Layer] != h.at
}

// prefetcher serves hints, current ones first.
func (s *Stager) prefetcher() {
	defer s.wg.Done()
	for {
		select {
		case h := <-s.current:
			s.prefetch(h)
			continue
		case <-s.done:
			return
		default:
		}
		select {
		case h := <-s.current:
			s.prefetch(h)
		case h := <-s.spec:
			s.prefetch(h)
		case <-s.done:
			return
		}
	}
}

// prefetch makes room for the hinted experts and reads them in. The units
// stay pinned until their pages are resident: unpinned while a read is in
// flight, an eviction could not drop the pages (the kernel skips pages
// under I/O) and they would arrive unaccounted.
func (s *Stager) prefetch(h hint) {
	var pinned []*cache.Entry
	var units [][]span
	s.mu.Lock()
	if s.stale(h) {
		s.mu.Unlock()
		return
	}
	for _, ex := range h.Experts {
		k := cache.Key{Layer: int32(h.Layer), Expert: int32(ex)}
		e, ok := s.cache.Peek(k)
		if !ok {
			var err error
			if e, err = s.insert(k); err != nil {
				continue // no unpinned room: skip this expert
			}
		}
		if _, ok := s.loading[k]; ok {
			continue // another hint's read
		}
		e.Pins++
		s.inflight++
		pinned = append(pinned, e)
		units = append(units, s.unitSpans(h.Layer, ex))
		s.loading[k] = make(chan struct{})
	}
	s.mu.Unlock()
	s.fetchGroups(units, func(i int) {
		s.mu.Lock()
		k := pinned[i].Key
		close(s.loading[k])
		delete(s.loading, k)
		s.mu.Unlock()
	})
	s.mu.Lock()
	s.inflight -= len(pinned)
	s.unpin(pinned)
	s.unpinned.Broadcast()
	s.mu.Unlock()
}

// Acquire pins the slices' units within the budget, then faults in
// whatever of them is not in the page cache.
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
	s.mu.Lock()
	for i, sl := range req.Slices {
		t := s.req.Tensors[sl.Tensor]
		if !t.Routed() {
			resp.Locations[i] = plugin.Location{Region: t.Shard, Offset: t.Offset, Size: t.Size}
			continue
		}
		k := cache.Key{Layer: int32(t.Layer), Expert: int32(sl.Expert)}
		e, err := s.lookup(k)
		if err != nil {
			s.unpin(pinned)
			s.mu.Unlock()
			return nil, fmt.Errorf("staging-mmap: acquire step %d: %w (budget %d bytes)", req.Step, err, s.req.Budget)
		}
		e.Pins++
		pinned = append(pinned, e)
		off := t.Offset + int64(sl.Expert)*t.ExpertSize
		sp := span{t.Shard, pageDown(off), pageUp(off + t.ExpertSize)}
		if ch, ok := s.loading[k]; ok {
			// A hint's read is under way: wait for it, then fault in
			// whatever it left (nothing, unless the read failed).
			s.stats.Misses++
			loads = append(loads, ch)
			fetch = append(fetch, sp)
		} else if s.missing(sp) > 0 {
			s.stats.Misses++
			fetch = append(fetch, sp)
		} else {
			s.stats.Hits++
		}
		resp.Locations[i] = plugin.Location{Region: t.Shard, Offset: off, Size: t.ExpertSize}
	}
	s.pins[req.Step] = append(s.pins[req.Step], pinned...)
	s.mu.Unlock()

	start := time.Now()
	for _, ch := range loads {
		<-ch
	}
	waited := time.Duration(0)
	if len(loads) > 0 {
		waited = time.Since(start)
	}
	if d := s.fetchAll(fetch) + waited; d > 0 {
		s.mu.Lock()
		s.stats.WaitTime += d
		s.mu.Unlock()
	}
	return resp, nil
}

// lookup finds or inserts k; while prefetches hold pins it waits for them
// rather than fail. The caller holds s.mu.
func (s *Stager) lookup(k cache.Key) (*cache.Entry, error) {
	for {
		if e, ok := s.cache.Get(k); ok {
			return e, nil
		}
		e, err := s.insert(k)
		if err == nil || !errors.Is(err, cache.ErrFull) || s.inflight == 0 {
			return e, err
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
	return nil
}
