package main

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/model"
	"github.com/k3-inference/k3/core/model/qwen3moe"
	"github.com/k3-inference/k3/core/synth"
)

// TestStagedQwen3MoEBitIdentical streams a Q4_K_M qwen3moe file's routed
// experts through each built-in stager (in-process and as a `k3 plugin`
// process) at budgets from everything-fits down to one layer's experts
// (batched prompt) and one token's (token by token), and wants the logits
// and greedy tokens of the plain file mapping bit for bit: the second
// architecture on the same streaming path, with nothing of its own.
func TestStagedQwen3MoEBitIdentical(t *testing.T) {
	cfg, err := synth.ArchPreset(synth.ArchQwen3MoE, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Type = synth.TypeQ4_K_M
	res, err := synth.Write(filepath.Join(t.TempDir(), "qwen3moe.gguf"), cfg, synth.WriteOptions{Split: gguf.SplitOptions{MaxTensors: 20}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Paths {
		if err := syncFile(p); err != nil {
			t.Fatal(err)
		}
	}
	path := res.Paths[0]
	const n = 5
	want := map[engine.Mode]trace{
		engine.Batch: plainTrace(t, path, engine.Batch, n),
		engine.Step:  plainTrace(t, path, engine.Step, n),
	}
	budgets := []struct {
		name  string
		units int
		mode  engine.Mode
	}{
		{"all", cfg.NLayer * cfg.NExpert, engine.Batch},
		{"layer", cfg.NExpert, engine.Batch},
		{"topk", cfg.NExpertUsed, engine.Step},
	}
	for _, name := range []string{"staging-pread", "staging-mmap"} {
		for _, inProcess := range []bool{true, false} {
			for _, b := range budgets {
				t.Run(fmt.Sprintf("%s/inprocess=%v/%s", name, inProcess, b.name), func(t *testing.T) {
					st, f := openStager(t, path, name, inProcess, b.units, engine.StageOptions{Lookahead: true})
					m, err := qwen3moe.New(f, st, model.Options{Threads: 2})
					if err != nil {
						t.Fatal(err)
					}
					sameTrace(t, runTrace(t, m, b.mode, n, nil), want[b.mode])
					stats, err := st.Stats()
					if err != nil {
						t.Fatal(err)
					}
					if stats.Hits+stats.Misses == 0 || stats.Predicted == 0 {
						t.Errorf("no expert traffic counted: %+v", stats)
					}
					if stats.ResidentBytes > stats.BudgetBytes {
						t.Errorf("resident %d over the budget %d", stats.ResidentBytes, stats.BudgetBytes)
					}
					toks := len(stagePrompt) + n
					t.Logf("%s: budget %d B, hits %d misses %d, read %d B (%d B/token), lookahead precision %.2f",
						stats.Mode, stats.BudgetBytes, stats.Hits, stats.Misses, stats.BytesRead, stats.BytesRead/int64(toks), stats.Precision())
				})
			}
		}
	}
}
