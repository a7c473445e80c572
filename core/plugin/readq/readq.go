// Package readq is a stager's queue of expert-unit reads, most urgent
// first: demand reads (a step waits for them), then the experts of layers
// already routed (current hints), then guesses (speculative hints). Hints
// the model has shown to be of no use are dropped before they take the
// device. staging-pread and staging-mmap both serve their reads from it.
//
// A Queue is not safe for concurrent use: the stager guards it with the
// mutex that guards its cache.
package readq

import "github.com/k3-inference/k3/core/plugin/cache"

// Prio is a read's urgency; lower is more urgent.
type Prio int

const (
	Demand Prio = iota
	Current
	Speculative
	nprio
)

// Job is one unit to read. Demand jobs come with their entry, already in
// the cache; hint jobs get one when a worker picks them up, if there is
// room (Entry nil).
type Job struct {
	Key   cache.Key
	Entry *cache.Entry
}

// Queue holds the jobs by priority, each in arrival order.
type Queue struct {
	q      [nprio][]Job
	queued map[cache.Key]Prio // most urgent priority a hint job for a key waits at
	layer  int                // of the latest current hint; -1 before the first
}

// New returns an empty queue.
func New() *Queue { return &Queue{queued: map[cache.Key]Prio{}, layer: -1} }

// Len is the number of jobs waiting, of every priority.
func (q *Queue) Len() int { return len(q.q[Demand]) + len(q.q[Current]) + len(q.q[Speculative]) }

// LenPrio is the number of jobs waiting at p.
func (q *Queue) LenPrio(p Prio) int { return len(q.q[p]) }

// Queued reports whether a hint job for k waits.
func (q *Queue) Queued(k cache.Key) bool { _, ok := q.queued[k]; return ok }

// Demand queues j (its entry set) ahead of every hint.
func (q *Queue) Demand(j Job) { q.q[Demand] = append(q.q[Demand], j) }

// Hint queues reads for the experts of layer for which have reports no
// cache entry, after dropping the queued hints this one shows to be stale
// (DropStale). A key already waiting at the same or a more urgent
// priority is not queued again.
func (q *Queue) Hint(layer int, experts []int, speculative bool, have func(cache.Key) bool) {
	p := Current
	if speculative {
		p = Speculative
	}
	q.DropStale(layer, experts, speculative)
	for _, e := range experts {
		k := cache.Key{Layer: int32(layer), Expert: int32(e)}
		if have(k) {
			continue
		}
		if w, ok := q.queued[k]; ok && w <= p {
			continue
		}
		q.queued[k] = p
		q.q[p] = append(q.q[p], Job{Key: k})
	}
}

// DropStale forgets queued hint reads that a hint of layer shows to be of
// no use. A current hint: guesses for its layer it did not choose, and
// any hint for an earlier layer (the model is past it); a current hint
// for a layer before the previous current hint's starts the next pass
// (token or batch) and drops every hint of the last one. A speculative
// one: the layer's earlier guesses it does not repeat (the model guesses
// a layer again, from fresher state, as it comes nearer). Read anyway,
// they would take bandwidth from the reads the model waits for and evict
// cached experts to make room; when the model needs them it hints them
// again. Guesses for later layers stay. A layer the model hints in parts
// drops its other parts' guesses too; they come back as the current hints
// of those parts. Jobs with an entry (demand) always stay.
func (q *Queue) DropStale(layer int, chosen []int, speculative bool) {
	keep := make(map[int32]bool, len(chosen))
	for _, e := range chosen {
		keep[int32(e)] = true
	}
	newPass := false
	if !speculative {
		newPass = layer < q.layer
		q.layer = layer
	}
	for _, p := range []Prio{Current, Speculative} {
		kept := q.q[p][:0]
		for _, j := range q.q[p] {
			l := int(j.Key.Layer)
			stale := p == Speculative && l == layer && !keep[j.Key.Expert]
			if !speculative && l < layer || newPass {
				stale = true
			}
			if !stale || j.Entry != nil {
				kept = append(kept, j)
				continue
			}
			if q.queued[j.Key] == p {
				delete(q.queued, j.Key)
			}
		}
		clear(q.q[p][len(kept):])
		q.q[p] = kept
	}
}

// Pop takes the most urgent job. A hint job's key stops counting as
// queued at that priority; the caller checks whether it still needs a
// read (a demand read or an earlier copy of the hint may have brought
// it). ok is false when the queue is empty.
func (q *Queue) Pop() (j Job, p Prio, ok bool) {
	for p = Demand; p < nprio; p++ {
		if len(q.q[p]) == 0 {
			continue
		}
		j = q.q[p][0]
		q.q[p][0] = Job{}
		q.q[p] = q.q[p][1:]
		if j.Entry == nil {
			if w, ok := q.queued[j.Key]; ok && w == p {
				delete(q.queued, j.Key)
			}
		}
		return j, p, true
	}
	return Job{}, 0, false
}
