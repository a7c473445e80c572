package plugintest

import (
	"context"
	"testing"

	"github.com/k3-inference/k3/core/plugin"
)

// BenchmarkColdExperts measures how fast st brings routed experts in from
// storage: a model of 2 layers × 64 experts × 3 tensors of 256 KiB (96 MiB),
// a budget of 16 units, and steps that each acquire 16 experts the cache
// does not hold. b.SetBytes makes `go test -bench` report MB/s of expert
// bytes delivered, to set against the disk's own bandwidth.
func BenchmarkColdExperts(b *testing.B, st plugin.Stager, footprint func(*plugin.OpenRequest, int) (int64, error), opts map[string]string) {
	ctx := context.Background()
	const layers, experts, topK, size = 2, 64, 16, 256 << 10
	m := Build(b, b.TempDir(), Spec{Shards: 1, Layers: layers, Experts: experts, TopK: topK, ExpertSizes: []int64{size, size, size}, Seed: 1})
	budget, err := footprint(&m.Req, topK)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Open(ctx, m.Request(budget, b.TempDir(), opts)); err != nil {
		b.Fatal(err)
	}
	defer st.Close(ctx)
	b.SetBytes(3 * topK * size)
	var step uint64
	for b.Loop() {
		// Alternate layers and rotate experts so every unit is cold.
		l := int(step % layers)
		first := int(step/layers) * topK % experts
		req := &plugin.AcquireRequest{Step: step}
		for _, id := range m.Routed(l) {
			for e := first; e < first+topK; e++ {
				req.Slices = append(req.Slices, plugin.Slice{Tensor: id, Expert: e})
			}
		}
		if _, err := st.Acquire(ctx, req); err != nil {
			b.Fatal(err)
		}
		if err := st.Release(ctx, &plugin.ReleaseRequest{Step: step}); err != nil {
			b.Fatal(err)
		}
		step++
	}
	s, err := st.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(s.Hits)/float64(max(s.Hits+s.Misses, 1)), "hit-rate")
}
