package engine_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/sample"
	"github.com/k3-inference/k3/core/tokenizer"
)

// BenchmarkSlotsDecode measures aggregate decode tokens/s of 1, 2 and 4
// concurrent clients on as many slots, their decode steps batched. The
// model is K3_BENCH_MODEL when set (a few-GB synthetic model shows what
// reading each weight once per step buys), else the tiny test model.
//
//	K3_BENCH_MODEL=/tmp/m.gguf go test ./core/engine -run '^$' -bench SlotsDecode -benchtime 1x
func BenchmarkSlotsDecode(b *testing.B) {
	path := tinyPath
	if p := os.Getenv("K3_BENCH_MODEL"); p != "" {
		path = p
	}
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.Load(f, model.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const gen = 32
	for _, clients := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			e, err := engine.New(m, tok, engine.Options{Context: 512, Slots: clients})
			if err != nil {
				b.Fatal(err)
			}
			bias := noEOG(e)
			var decode float64
			for i := range b.N {
				var wg sync.WaitGroup
				res := make([]engine.Result, clients)
				errs := make([]error, clients)
				for c := range clients {
					wg.Go(func() {
						req := engine.Request{Text: fmt.Sprintf("Client %d says something new (%d).", c, i), MaxTokens: gen, Sampling: sample.Config{LogitBias: bias}}
						res[c], errs[c] = e.Generate(context.Background(), req, func(engine.Piece) error { return nil })
					})
				}
				wg.Wait()
				for c, r := range res {
					if errs[c] != nil {
						b.Fatal(errs[c])
					}
					decode += r.DecodeTPS()
				}
			}
			steps, rows := engine.StepStats(e)
			b.ReportMetric(decode/float64(b.N), "decode-tok/s")
			b.ReportMetric(float64(rows)/float64(max(steps, 1)), "seqs/step")
		})
	}
}
