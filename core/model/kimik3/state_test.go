package kimik3_test

import (
	"testing"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/kimik3"
	"github.com/k3-inference/k3/core/state"
)

// TestStateSize: what StateSize says from the file alone is what a
// sequence holds after n tokens (fixed + n per position), for the absorbed
// MLA layout and the attn_kv_b one; and a runner's context caps the
// caches' growth at its rows.
func TestStateSize(t *testing.T) {
	c := small()
	c.VHead = c.KVLoRA // expandKVB's condition
	src := writeModel(t, c)
	for name, path := range map[string]string{"absorbed": src, "attn_kv_b": expandKVB(t, src, c)} {
		t.Run(name, func(t *testing.T) {
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fixed, perToken, err := kimik3.StateSize(f, f)
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.Load(f, model.Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			// 200 tokens in ubatches of 48: doubling would take the
			// caches to 384 rows, the context (rounded up) holds 256.
			const n = 200
			r := engine.NewRunner(m, engine.Batch, 48)
			r.SetContext(n)
			if _, err := r.Prefill(prompt(n, c.NVocab), false); err != nil {
				t.Fatal(err)
			}
			var held, capacity int64
			s := r.S.(*state.Sequence)
			for _, rc := range s.Rec {
				if rc != nil {
					held += 4 * int64(len(rc.SSM))
					for _, cv := range rc.Conv {
						held += 4 * int64(len(cv))
					}
				}
			}
			fixedHeld := held
			for _, hc := range s.Cache {
				if hc != nil {
					held += 2 * int64(hc.Len*hc.Stride)
					capacity += 2 * int64(cap(hc.Data))
				}
			}
			if fixedHeld != fixed || held != fixed+n*perToken || perToken == 0 {
				t.Errorf("StateSize says %d + %d per token; the sequence holds %d fixed, %d after %d tokens", fixed, perToken, fixedHeld, held, n)
			}
			if capacity > 256*perToken {
				t.Errorf("caches took %d bytes of capacity, over the context's 256 rows (%d)", capacity, 256*perToken)
			}
		})
	}
}
