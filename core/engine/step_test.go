package engine

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/k3-inference/k3/core/model"
)

// countModel is a Batcher whose logits say what it saw: logit 0 is the
// sequence's position after the call, logit 1 the sum of its tokens; it
// records the token runs of every call.
type countModel struct {
	mu    sync.Mutex
	calls [][]int // lengths of the runs of each call
}

type countState struct{ n int }

func (s *countState) Pos() int                     { return s.n }
func (s *countState) SetContext(int)               {}
func (s *countState) Snapshot() model.Snapshot     { return nil }
func (s *countState) Restore(model.Snapshot) error { return fmt.Errorf("no snapshots") }
func (m *countModel) Params() model.Params         { return model.Params{Arch: "count", Vocab: 2} }
func (m *countModel) NewState() model.State        { return &countState{} }
func (m *countModel) Forward(s model.State, toks []int32, _ bool, logits []float32) error {
	return m.ForwardBatch([]model.State{s}, [][]int32{toks}, logits)
}

func (m *countModel) ForwardBatch(states []model.State, tokens [][]int32, logits []float32) error {
	var lens []int
	for i, s := range states {
		cs := s.(*countState)
		cs.n += len(tokens[i])
		sum := 0
		for _, t := range tokens[i] {
			sum += int(t)
		}
		logits[2*i], logits[2*i+1] = float32(cs.n), float32(sum)
		lens = append(lens, len(tokens[i]))
	}
	m.mu.Lock()
	m.calls = append(m.calls, lens)
	m.mu.Unlock()
	return nil
}

// TestStepperPrefillBatches: prompt batches of three slots handed in
// while the model runs go through the next forward call together, and
// each slot gets the logits of its own run.
func TestStepperPrefillBatches(t *testing.T) {
	for _, maxRows := range []int{16, 6} {
		t.Run(fmt.Sprint(maxRows), func(t *testing.T) { stepperBatches(t, maxRows) })
	}
}

// stepperBatches: with maxRows 16 all three runs go in one call; with 6
// no call runs more than 6 rows unless it runs one prompt batch alone.
func stepperBatches(t *testing.T, maxRows int) {
	m := &countModel{}
	st := newStepper(m, maxRows)
	st.lock() // the model is busy: the requests queue up
	runs := [][]int32{{1, 2, 3}, {4, 5}, {6, 7, 8, 9}}
	got := make([][]float32, len(runs))
	var wg sync.WaitGroup
	for i, toks := range runs {
		wg.Go(func() {
			r := &Runner{M: m, S: m.NewState(), Mode: Batch}
			var err error
			if got[i], err = st.prefill(r, toks, false); err != nil {
				t.Error(err)
			}
		})
	}
	for {
		st.pmu.Lock()
		n := len(st.pending)
		st.pmu.Unlock()
		if n == len(runs) {
			break
		}
		runtime.Gosched() // until all three wait
	}
	st.unlock()
	wg.Wait()
	for _, call := range m.calls {
		rows := 0
		for _, n := range call {
			rows += n
		}
		if rows > maxRows && len(call) > 1 {
			t.Errorf("a call ran %v: more than %d rows", call, maxRows)
		}
	}
	if maxRows >= 9 && (len(m.calls) != 1 || len(m.calls[0]) != 3) {
		t.Fatalf("forward calls ran runs of %v, want one call of three", m.calls)
	}
	for i, toks := range runs {
		sum := 0
		for _, x := range toks {
			sum += int(x)
		}
		if want := []float32{float32(len(toks)), float32(sum)}; !slices.Equal(got[i], want) {
			t.Errorf("run %d: logits %v, want %v", i, got[i], want)
		}
	}
	if calls, batches := st.prefillStats(); calls != int64(len(m.calls)) || batches != 3 {
		t.Errorf("prefill stats %d calls, %d batches; the model saw %v", calls, batches, m.calls)
	}
}

// slowModel is countModel taking d per forward call.
type slowModel struct {
	countModel
	d time.Duration
}

func (m *slowModel) Forward(s model.State, toks []int32, all bool, logits []float32) error {
	return m.ForwardBatch([]model.State{s}, [][]int32{toks}, logits)
}

func (m *slowModel) ForwardBatch(states []model.State, tokens [][]int32, logits []float32) error {
	time.Sleep(m.d)
	return m.countModel.ForwardBatch(states, tokens, logits)
}

// TestStepperDecodeBatched: four slots decoding together stay in one
// batch step after step: a slot whose logits are ready gets them while
// another, back first, holds the turn waiting for the rest (with a lock
// it waited for that slot's gathering to time out, and the steps fell
// apart into one- and three-row calls).
func TestStepperDecodeBatched(t *testing.T) {
	m := &slowModel{d: 20 * time.Millisecond}
	st := newStepper(m, 16)
	const slots, steps = 4, 12
	for range slots {
		st.begin()
	}
	var wg sync.WaitGroup
	for i := range slots {
		wg.Go(func() {
			defer st.end()
			s := m.NewState()
			for k := range steps {
				logits, err := st.decode(s, int32(i+k))
				if err != nil {
					t.Error(err)
					return
				}
				if logits[0] != float32(k+1) {
					t.Errorf("slot %d step %d: position %v", i, k, logits[0])
				}
			}
		})
	}
	wg.Wait()
	calls, rows := st.stats()
	t.Logf("%d calls ran %d rows: %v", calls, rows, m.calls)
	if rows != slots*steps || calls > steps+2 {
		t.Errorf("%d decode calls ran %d rows, want about %d calls of %d", calls, rows, steps, slots)
	}
}

// panicModel is countModel panicking on its first call.
type panicModel struct {
	countModel
	panicked bool
}

func (m *panicModel) Forward(s model.State, toks []int32, all bool, logits []float32) error {
	return m.ForwardBatch([]model.State{s}, [][]int32{toks}, logits)
}

func (m *panicModel) ForwardBatch(states []model.State, tokens [][]int32, logits []float32) error {
	if !m.panicked {
		m.panicked = true
		panic("model fault")
	}
	return m.countModel.ForwardBatch(states, tokens, logits)
}

// TestStepperPanicGivesBackTurn: a forward call that panics (recovered
// up the stack, as the server's middleware does) leaves the model free
// for the next one.
func TestStepperPanicGivesBackTurn(t *testing.T) {
	m := &panicModel{}
	st := newStepper(m, 16)
	s := m.NewState()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the model's panic did not reach the caller")
			}
		}()
		st.decode(s, 1)
	}()
	done := make(chan error, 1)
	go func() {
		_, err := st.decode(s, 2)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the next call waits for a turn the panicking one kept")
	}
}
