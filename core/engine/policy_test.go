package engine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/sample"
)

// TestPrefixCachePolicy is a multi-turn agent run: conversations sharing
// a system prompt take turns on two slots with the prefix cache on, two
// (each keeps its slot) and three (one is always displaced). Every turn
// after a conversation's first
// resumes at least its previous prompt (from its slot or the cache) and
// gets the reply a fresh engine gives; the cache entries written and
// their bytes are logged (what the snapshot policy costs), and stay
// below one per turn: a conversation's end is written only when its slot
// goes to another conversation.
func TestPrefixCachePolicy(t *testing.T) {
	for _, convs := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d conversations", convs), func(t *testing.T) { agentRun(t, convs, 4) })
	}
}

func agentRun(t *testing.T, convs, turns int) {
	e := newEngine(t, engine.Options{Slots: 2, UBatch: 16, PrefixCache: engine.CacheOptions{Mem: 256 << 20, MinShared: 8}})
	ps := make([][]int32, convs)
	for c := range ps {
		ps[c] = prompt(t, e, system+fmt.Sprintf("Conversation %d starts here.", c))
	}
	prev := make([]int, convs)
	for turn := range turns {
		for c := range convs {
			req := engine.Request{Prompt: ps[c], MaxTokens: 4, Sampling: sample.Config{LogitBias: noEOG(e)}}
			r := generate(e, context.Background(), req, nil)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if turn > 0 && r.res.ReusedTokens < prev[c] {
				t.Errorf("conversation %d turn %d: reused %d of its previous prompt's %d tokens", c, turn, r.res.ReusedTokens, prev[c])
			}
			want, _ := fresh(t, engine.Options{UBatch: 16}, req)
			if d := cmp.Diff(want, r.tokens); d != "" {
				t.Errorf("conversation %d turn %d (-fresh +slots):\n%s", c, turn, d)
			}
			prev[c] = len(ps[c])
			ps[c] = concat(ps[c], r.tokens, prompt(t, e, fmt.Sprintf(" Next %d.", turn))[1:])
		}
	}
	st := e.CacheStats()
	t.Logf("%d conversations x %d turns on 2 slots: %d cache entries written, %d bytes (%d indexed now, %d bytes in memory)",
		convs, turns, st.Written, st.WrittenBytes, st.Entries, st.MemBytes)
	if st.Written >= int64(convs*turns) {
		t.Errorf("%d cache entries written for %d turns", st.Written, convs*turns)
	}
}
