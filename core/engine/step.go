package engine

import (
	"sync"
	"time"

	"github.com/k3-inference/k3/core/model"
)

// gather is the longest a step waits for the other decoding slots to hand
// in their next token: between steps a slot samples and sends a token to
// its client, which takes far less than a step of a large model.
const gather = 2 * time.Millisecond

// stepper runs the model for all slots, one forward call at a time: a
// prompt batch of one slot, or one decode step of every slot that waits
// to decode, as one batch (model.ForwardBatch). A slot that asks to decode
// while another call runs waits, and the next step takes every slot
// waiting by then (group commit), so steps stay batched without a
// scheduler goroutine.
type stepper struct {
	m  model.Model
	mu sync.Mutex // held while the model runs

	pmu      sync.Mutex
	pending  []*stepReq
	decoding int           // slots between their prompt and their end
	arrived  chan struct{} // signalled when a request is queued

	// Steps and Rows count decode steps and the sequences they ran (the
	// batching's effect, reported by tests and benchmarks).
	steps, rows int64
}

type stepReq struct {
	s      model.State
	tok    int32
	logits []float32
	err    error
	done   chan struct{}
}

func newStepper(m model.Model) *stepper {
	return &stepper{m: m, arrived: make(chan struct{}, 1)}
}

// prefill runs one prompt batch of a slot.
func (st *stepper) prefill(r *Runner, part []int32, all bool) ([]float32, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return r.Prefill(part, all)
}

// begin and end bracket a slot's decoding, so that a step knows how many
// slots may still hand in a token.
func (st *stepper) begin() {
	st.pmu.Lock()
	st.decoding++
	st.pmu.Unlock()
}

func (st *stepper) end() {
	st.pmu.Lock()
	st.decoding--
	st.pmu.Unlock()
	st.signal()
}

func (st *stepper) signal() {
	select {
	case st.arrived <- struct{}{}:
	default:
	}
}

// decode appends tok to s and returns the logits of its position, run in
// one batch with the other slots' steps.
func (st *stepper) decode(s model.State, tok int32) ([]float32, error) {
	r := &stepReq{s: s, tok: tok, done: make(chan struct{})}
	st.pmu.Lock()
	st.pending = append(st.pending, r)
	st.pmu.Unlock()
	st.signal()

	st.mu.Lock()
	select {
	case <-r.done: // an earlier step took it
		st.mu.Unlock()
		return r.logits, r.err
	default:
	}
	batch := st.collect()
	st.run(batch)
	st.mu.Unlock()
	<-r.done
	return r.logits, r.err
}

// collect takes the pending requests, waiting up to gather for every
// decoding slot to hand one in (st.mu held).
func (st *stepper) collect() []*stepReq {
	deadline := time.NewTimer(gather)
	defer deadline.Stop()
	for {
		st.pmu.Lock()
		if len(st.pending) >= st.decoding {
			break
		}
		st.pmu.Unlock()
		select {
		case <-st.arrived:
			continue
		case <-deadline.C:
		}
		st.pmu.Lock()
		break
	}
	batch := st.pending
	st.pending = nil
	st.steps++
	st.rows += int64(len(batch))
	st.pmu.Unlock()
	return batch
}

// run runs one decode step of the batch and hands each request its
// logits or the error.
func (st *stepper) run(batch []*stepReq) {
	v := st.m.Params().Vocab
	states := make([]model.State, len(batch))
	tokens := make([]int32, len(batch))
	for i, r := range batch {
		states[i], tokens[i] = r.s, r.tok
	}
	logits := make([]float32, len(batch)*v)
	err := model.ForwardBatch(st.m, states, tokens, logits)
	for i, r := range batch {
		r.err = err
		if err == nil {
			r.logits = logits[i*v : (i+1)*v : (i+1)*v]
		}
		close(r.done)
	}
}

// stats returns the decode steps run and the sequences they ran.
func (st *stepper) stats() (steps, rows int64) {
	st.pmu.Lock()
	defer st.pmu.Unlock()
	return st.steps, st.rows
}
