package kimik3_test

import (
	"bytes"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/state"
	"github.com/k3-inference/k3/core/synth"
)

// TestForwardBatch: prompt batches of different lengths, then decode
// steps, of three sequences at different positions (one past the point
// where attention over the cache splits across threads) run as one batch
// give, bit for bit, the logits and the states each gets alone, for both
// MLA layouts and a quantized model.
func TestForwardBatch(t *testing.T) {
	c := small()
	c.VHead = c.KVLoRA // expandKVB's condition
	src := writeModel(t, c)
	q := small()
	q.Type = synth.TypeQ2_K
	for name, path := range map[string]string{"absorbed": src, "attn_kv_b": expandKVB(t, src, c), "q2_k": writeModel(t, q)} {
		t.Run(name, func(t *testing.T) {
			m := load(t, path, 2)
			b, ok := m.(model.Batcher)
			if !ok {
				t.Fatal("kimi-k3 is not a model.Batcher")
			}
			v := m.Params().Vocab
			lens := []int{3, 40, 600}
			batched := make([]model.State, len(lens))
			alone := make([]model.State, len(lens))
			scratch := make([]float32, v)
			for i, n := range lens {
				s := m.NewState()
				s.SetContext(1024)
				toks := prompt(n, c.NVocab)
				for j := range toks {
					toks[j] = (toks[j] + int32(i)) % int32(c.NVocab)
				}
				if err := m.Forward(s, toks, false, scratch); err != nil {
					t.Fatal(err)
				}
				batched[i] = s
				alone[i] = clone(t, m, s)
			}
			// A step of prompt runs of several lengths (several requests
			// prefilled at once, one of them a single token), then decode
			// steps.
			steps := [][]int{{17, 5, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}}
			for step, ns := range steps {
				tokens := make([][]int32, len(lens))
				for i, n := range ns {
					for j := range n {
						tokens[i] = append(tokens[i], int32((step*7+i*3+j*5+1)%c.NVocab))
					}
				}
				got := make([]float32, len(lens)*v)
				if err := b.ForwardBatch(batched, tokens, got); err != nil {
					t.Fatal(err)
				}
				for i := range lens {
					want := make([]float32, v)
					if err := m.Forward(alone[i], tokens[i], false, want); err != nil {
						t.Fatal(err)
					}
					if !slices.EqualFunc(want, got[i*v:(i+1)*v], func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
						t.Errorf("step %d, sequence %d (%d tokens): batched logits differ from alone", step, i, len(tokens[i]))
					}
					if !bytes.Equal(stateBytes(t, batched[i]), stateBytes(t, alone[i])) {
						t.Errorf("step %d, sequence %d: batched state differs from alone", step, i)
					}
				}
			}
			if err := b.ForwardBatch([]model.State{batched[0], batched[0]}, [][]int32{{1}, {2}}, make([]float32, 2*v)); err == nil {
				t.Error("a sequence twice in one batch was accepted")
			}
		})
	}
}

func stateBytes(t *testing.T, s model.State) []byte {
	t.Helper()
	b, err := s.(*state.Sequence).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func clone(t *testing.T, m model.Model, s model.State) model.State {
	t.Helper()
	c := m.NewState()
	c.SetContext(1024)
	if err := c.(model.Portable).UnmarshalBinary(stateBytes(t, s)); err != nil {
		t.Fatal(err)
	}
	return c
}

// BenchmarkForwardBatch compares one decode step of four sequences as
// one batch with four single-sequence steps.
func BenchmarkForwardBatch(b *testing.B) {
	c := small()
	c.Type = synth.TypeQ2_K
	path := filepath.Join(b.TempDir(), "m.gguf")
	if _, err := synth.Write(path, c, synth.WriteOptions{Workers: 2}); err != nil {
		b.Fatal(err)
	}
	m := load(b, path, 2)
	v := m.Params().Vocab
	states := make([]model.State, 4)
	for i := range states {
		states[i] = m.NewState()
		states[i].SetContext(4096)
		if err := m.Forward(states[i], prompt(20+i, c.NVocab), false, make([]float32, v)); err != nil {
			b.Fatal(err)
		}
	}
	tokens := [][]int32{{1}, {2}, {3}, {4}}
	logits := make([]float32, 4*v)
	b.Run("batched", func(b *testing.B) {
		for range b.N {
			if err := m.(model.Batcher).ForwardBatch(states, tokens, logits); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("one-by-one", func(b *testing.B) {
		for range b.N {
			for i, s := range states {
				if err := m.Forward(s, tokens[i], false, logits[i*v:(i+1)*v]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
