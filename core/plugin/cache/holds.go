package cache

// Holds keeps the units hint reads brought in pinned until the model
// reaches their layer. A freshly read unit has the fewest accesses in the
// cache, so without a hold the next read's insertion evicts it first and
// the step that needs it reads it again (measured with staging-mmap on a
// 47-unit cache: 94% of hinted units evicted unused). Stagers release the
// holds when an Acquire reaches a layer, and all of them when an
// insertion finds nothing but pins. The caller serializes access.
type Holds struct {
	held map[int32][]*Entry
	last int32 // layer of the last Reached
}

// Add keeps e's pin (one the caller took) as a hold for e's layer.
func (h *Holds) Add(e *Entry) {
	if h.held == nil {
		h.held = map[int32][]*Entry{}
	}
	h.held[e.Key.Layer] = append(h.held[e.Key.Layer], e)
}

// Reached releases the holds an Acquire of layer makes needless: those of
// earlier layers (wrong guesses among them included); at the start of a
// pass (a layer before the last one reached) every hold, all of them left
// from the previous pass. The layer's own holds stay until an Acquire
// takes their unit (Take) or the model moves on: a layer acquired in
// groups still needs the units hinted for its later groups, and a hold
// released early lets the next read evict them unused. It reports
// whether it released any.
func (h *Holds) Reached(layer int32) bool {
	newPass := layer < h.last
	h.last = layer
	return h.release(func(l int32) bool { return newPass || l < layer })
}

// Take releases e's hold, if it has one: an Acquire pinned it for its
// step. It reports whether it did.
func (h *Holds) Take(e *Entry) bool {
	es := h.held[e.Key.Layer]
	for i, x := range es {
		if x == e {
			es[i] = es[len(es)-1]
			h.held[e.Key.Layer] = es[:len(es)-1]
			e.Pins--
			return true
		}
	}
	return false
}

// ReleaseAll releases every hold and reports whether there were any.
func (h *Holds) ReleaseAll() bool { return h.release(func(int32) bool { return true }) }

// Len is the number of units held.
func (h *Holds) Len() int {
	n := 0
	for _, es := range h.held {
		n += len(es)
	}
	return n
}

func (h *Holds) release(drop func(layer int32) bool) bool {
	any := false
	for l, es := range h.held {
		if !drop(l) {
			continue
		}
		for _, e := range es {
			e.Pins--
		}
		delete(h.held, l)
		any = true
	}
	return any
}
