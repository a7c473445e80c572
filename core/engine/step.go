package engine

import (
	"slices"
	"sync"
	"time"

	"github.com/k3-inference/k3/core/model"
)

// minGather is the least a step waits for the other decoding slots to
// hand in their next token; a step waits up to gatherShare of the last
// decode step's time. Between steps a slot samples and sends a token to its
// client, far less than a step of a large model; but on a loaded machine
// a slot's goroutine can wait milliseconds to run, and a step that goes
// without it leaves it to a step of its own, a whole pass over the
// weights for one token, after which the slots keep falling out of step.
const (
	minGather   = 2 * time.Millisecond
	gatherShare = 8
)

// stepper runs the model for all slots, one forward call at a time. Every
// call is one batch (model.ForwardBatch) of whatever the slots have handed
// in by then: the next token of each decoding slot and the next prompt
// batch of each prefilling one, so several new requests' prompts are
// prefilled together and prompt batches interleave with decode steps. A
// slot that hands in work while another call runs waits, and the next
// call takes every slot waiting by then (group commit), so calls stay
// batched without a scheduler goroutine. Prompt batches beyond one
// ubatch of rows wait for the next call.
type stepper struct {
	m       model.Model
	maxRows int // tokens one call may run: the ubatch
	// turn is held (a token in it) while the model runs. A slot waits for
	// its result or the turn, whichever comes first: a slot whose result
	// is ready goes on at once, not after every other waiter took the
	// turn in its own turn.
	turn chan struct{}
	last time.Duration // the last call of decode tokens only: its time (turn held)

	pmu      sync.Mutex
	pending  []*stepReq
	decoding int           // slots between their prompt and their end
	arrived  chan struct{} // signalled when a request is queued

	// steps and rows count the calls that ran decode tokens and the
	// sequences they ran; prefills and prefillRows the calls that ran
	// prompt batches and the sequences they ran (the batching's effect,
	// reported by tests and benchmarks).
	steps, rows, prefills, prefillRows int64
}

type stepReq struct {
	s      model.State
	toks   []int32
	logits []float32
	err    error
	done   chan struct{}
}

func newStepper(m model.Model, ubatch int) *stepper {
	if ubatch <= 0 {
		ubatch = DefaultUBatch
	}
	return &stepper{m: m, maxRows: ubatch, turn: make(chan struct{}, 1), arrived: make(chan struct{}, 1)}
}

// lock and unlock take and give back the turn: the model alone.
func (st *stepper) lock()   { st.turn <- struct{}{} }
func (st *stepper) unlock() { <-st.turn }

// prefill runs one prompt batch of a slot: batched with the other slots'
// work in Batch mode; alone, holding the model, when every position's
// logits are wanted (echo) or the prompt is fed token by token (Step).
func (st *stepper) prefill(r *Runner, part []int32, all bool) ([]float32, error) {
	if all || r.Mode == Step {
		st.lock()
		defer st.unlock()
		return r.Prefill(part, all)
	}
	return st.forward(r.S, part)
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
// one batch with the other slots' work.
func (st *stepper) decode(s model.State, tok int32) ([]float32, error) {
	return st.forward(s, []int32{tok})
}

// forward appends toks to s and returns the logits of the last of them,
// run in one batch with the other slots' work.
func (st *stepper) forward(s model.State, toks []int32) ([]float32, error) {
	r := &stepReq{s: s, toks: toks, done: make(chan struct{})}
	st.pmu.Lock()
	st.pending = append(st.pending, r)
	st.pmu.Unlock()
	st.signal()

	for {
		select {
		case <-r.done: // a call took it
			return r.logits, r.err
		case st.turn <- struct{}{}:
		}
		st.take(r)
	}
}

// take runs a call unless one before took r (turn held; given back even
// if the model panics).
func (st *stepper) take(r *stepReq) {
	defer st.unlock()
	select {
	case <-r.done:
	default:
		st.run(st.collect())
	}
}

// collect takes the pending requests, waiting up to a share of the last
// decode step's time for every decoding slot to hand one in (turn held).
func (st *stepper) collect() []*stepReq {
	deadline := time.NewTimer(max(minGather, st.last/gatherShare))
	defer deadline.Stop()
	for {
		st.pmu.Lock()
		if st.decoders() >= st.decoding {
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
	// Every decode token goes; prompt batches go in the order they came
	// while the call stays within maxRows (the activations the budget
	// reserves are for one ubatch), the first one always.
	var batch, left []*stepReq
	rows, dec, pre := 0, 0, 0
	for _, r := range st.pending {
		if len(r.toks) == 1 {
			batch = append(batch, r)
			rows++
			dec++
		}
	}
	for _, r := range st.pending {
		if len(r.toks) == 1 {
			continue
		}
		if pre > 0 && rows+len(r.toks) > st.maxRows {
			left = append(left, r)
			continue
		}
		batch = append(batch, r)
		rows += len(r.toks)
		pre++
	}
	st.pending = left
	if dec > 0 {
		st.steps++
		st.rows += int64(dec)
	}
	if pre > 0 {
		st.prefills++
		st.prefillRows += int64(pre)
	}
	st.pmu.Unlock()
	return batch
}

// decoders counts the pending single tokens (st.pmu held): decode steps,
// or a one-token prompt batch, which waits no longer than one.
func (st *stepper) decoders() int {
	n := 0
	for _, r := range st.pending {
		if len(r.toks) == 1 {
			n++
		}
	}
	return n
}

// run runs one forward call of the batch and hands each request its
// logits or the error.
func (st *stepper) run(batch []*stepReq) {
	v := st.m.Params().Vocab
	states := make([]model.State, len(batch))
	tokens := make([][]int32, len(batch))
	for i, r := range batch {
		states[i], tokens[i] = r.s, r.toks
	}
	logits := make([]float32, len(batch)*v)
	start := time.Now()
	err := model.ForwardBatch(st.m, states, tokens, logits)
	if !slices.ContainsFunc(tokens, func(t []int32) bool { return len(t) != 1 }) {
		st.last = time.Since(start) // a prompt batch's call says nothing of a step's
	}
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

// prefillStats returns the forward calls that ran prompt batches and the
// prompt batches they ran.
func (st *stepper) prefillStats() (calls, batches int64) {
	st.pmu.Lock()
	defer st.pmu.Unlock()
	return st.prefills, st.prefillRows
}
