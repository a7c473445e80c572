package engine_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/sample"
)

const system = "You are a careful assistant. Answer briefly, cite nothing, and keep every reply under forty words. "

// turn runs one greedy turn of a conversation and returns the prompt of
// the next turn: this one, the reply and the user's next words.
func turn(t *testing.T, e *engine.Engine, p []int32, next string) (run, []int32) {
	t.Helper()
	r := generate(e, context.Background(), engine.Request{Prompt: p, MaxTokens: 4, Sampling: sample.Config{LogitBias: noEOG(e)}}, nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r, concat(p, r.tokens, prompt(t, e, next)[1:])
}

// TestSlotsAlternate: two conversations that share a system prompt and
// alternate on two slots each keep their slot: every turn after the first
// reuses at least its previous prompt, and the replies are those of each
// conversation run alone on a one-slot engine.
func TestSlotsAlternate(t *testing.T) {
	e := newEngine(t, engine.Options{Slots: 2, UBatch: 16})
	if e.Slots() != 2 {
		t.Fatalf("%d slots", e.Slots())
	}
	convs := [2][]int32{prompt(t, e, system+"Question one?"), prompt(t, e, system+"Something else entirely.")}
	nexts := [2][]string{{" More.", " Again."}, {" Why?", " How?"}}
	var replies [2][][]int32
	prev := [2]int{}
	slotOf := [2]int{-1, -1}
	for round := range 3 {
		for c := range 2 {
			next := " end"
			if round < 2 {
				next = nexts[c][round]
			}
			p := convs[c]
			r, np := turn(t, e, p, next)
			if round > 0 && r.res.ReusedTokens < prev[c] {
				t.Errorf("conversation %d turn %d: reused %d tokens of its previous prompt's %d", c, round, r.res.ReusedTokens, prev[c])
			}
			if round > 0 && r.res.Slot != slotOf[c] {
				t.Errorf("conversation %d moved from slot %d to %d", c, slotOf[c], r.res.Slot)
			}
			slotOf[c], prev[c], convs[c] = r.res.Slot, len(p), np
			replies[c] = append(replies[c], r.tokens)
		}
	}
	if slotOf[0] == slotOf[1] {
		t.Errorf("both conversations ran on slot %d", slotOf[0])
	}
	info := e.SlotInfo()
	if len(info) != 2 || info[0].Tokens == 0 || info[1].Tokens == 0 || info[0].Processing || info[0].Context != e.Context() {
		t.Errorf("slot info %+v", info)
	}
	// Each conversation alone, on one slot, from scratch every turn.
	for c := range 2 {
		alone := newEngine(t, engine.Options{UBatch: 16})
		p := prompt(t, alone, system+[]string{"Question one?", "Something else entirely."}[c])
		for round := range 3 {
			alone.Reset()
			next := " end"
			if round < 2 {
				next = nexts[c][round]
			}
			r, np := turn(t, alone, p, next)
			if d := cmp.Diff(r.tokens, replies[c][round]); d != "" {
				t.Errorf("conversation %d turn %d: (-alone +slots)\n%s", c, round, d)
			}
			p = np
		}
	}
}

// TestSlotsConcurrent: four requests at once on four slots each get the
// tokens they get alone; their decode steps ran batched.
func TestSlotsConcurrent(t *testing.T) {
	e := newEngine(t, engine.Options{Slots: 4})
	texts := []string{"The first request", "A second one, longer than the first", "Third", "And the fourth request here"}
	want := make([][]int32, len(texts))
	for i, text := range texts {
		alone := newEngine(t, engine.Options{})
		r := generate(alone, context.Background(), engine.Request{Text: text, MaxTokens: 12, Sampling: sample.Config{LogitBias: noEOG(alone)}}, nil)
		if r.err != nil {
			t.Fatal(r.err)
		}
		want[i] = r.tokens
	}
	got := make([]run, len(texts))
	var wg sync.WaitGroup
	for i, text := range texts {
		wg.Go(func() {
			got[i] = generate(e, context.Background(), engine.Request{Text: text, MaxTokens: 12, Sampling: sample.Config{LogitBias: noEOG(e)}}, nil)
		})
	}
	wg.Wait()
	slotsUsed := map[int]bool{}
	for i, r := range got {
		if r.err != nil {
			t.Fatal(r.err)
		}
		if d := cmp.Diff(want[i], r.tokens); d != "" {
			t.Errorf("request %d (-alone +concurrent):\n%s", i, d)
		}
		slotsUsed[r.res.Slot] = true
	}
	if len(slotsUsed) != 4 {
		t.Errorf("requests ran on slots %v", slotsUsed)
	}
	steps, rows := engine.StepStats(e)
	t.Logf("%d decode steps ran %d sequences (%.2f per step)", steps, rows, float64(rows)/float64(steps))
}

func fingerprint(t *testing.T) [32]byte {
	t.Helper()
	f, err := gguf.Open(tinyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fp, err := f.Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// TestPrefixCacheShared: on one slot, a second conversation that shares
// the first's system prompt snapshots the shared part into the cache; the
// first conversation, displaced from the slot, resumes from its whole
// prompt in the cache, and a third starts from the system prompt. Every
// reply is the one a fresh engine gives.
func TestPrefixCacheShared(t *testing.T) {
	e := newEngine(t, engine.Options{UBatch: 16, PrefixCache: engine.CacheOptions{Mem: 64 << 20, MinShared: 8}})
	sys := prompt(t, e, system)
	a := prompt(t, e, system+"Question one?")
	b := prompt(t, e, system+"Something else entirely.")
	c := prompt(t, e, system+"A third conversation.")
	shared := commonLen(a, b)
	if shared < len(sys)-1 {
		t.Fatalf("prompts share %d tokens, the system prompt has %d", shared, len(sys))
	}
	req := func(p []int32) engine.Request {
		return engine.Request{Prompt: p, MaxTokens: 4, Sampling: sample.Config{LogitBias: noEOG(e)}}
	}
	for _, tc := range []struct {
		name   string
		p      []int32
		cached int
	}{
		{"first", a, 0},
		{"shares the system prompt", b, 0},
		{"first again", a, len(a)},
		{"third", c, shared},
	} {
		r := generate(e, context.Background(), req(tc.p), nil)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.res.CachedTokens != tc.cached || r.res.ReusedTokens != tc.cached {
			t.Errorf("%s: cached %d, reused %d, want %d", tc.name, r.res.CachedTokens, r.res.ReusedTokens, tc.cached)
		}
		want, _ := fresh(t, engine.Options{UBatch: 16}, req(tc.p))
		if d := cmp.Diff(want, r.tokens); d != "" {
			t.Errorf("%s: (-fresh +cached)\n%s", tc.name, d)
		}
	}
}

func commonLen(a, b []int32) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

// logTo is a logger that writes into buf.
func logTo(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// TestPrefixCacheDisk: entries written to a directory survive the engine:
// a new engine on the same directory resumes a new conversation from the
// system prompt and an old one from its whole prompt, with the replies of
// a fresh engine. Files that are truncated, bit-flipped or of another
// model are ignored with a warning, never loaded; the disk bound holds.
func TestPrefixCacheDisk(t *testing.T) {
	dir := t.TempDir()
	fp := fingerprint(t)
	co := engine.CacheOptions{Dir: dir, Fingerprint: fp, MinShared: 8}
	e := newEngine(t, engine.Options{UBatch: 16, PrefixCache: co})
	a := prompt(t, e, system+"Question one?")
	b := prompt(t, e, system+"Something else entirely.")
	c := prompt(t, e, system+"A third conversation.")
	shared := commonLen(a, b)
	req := func(p []int32) engine.Request {
		return engine.Request{Prompt: p, MaxTokens: 4, Sampling: sample.Config{LogitBias: noEOG(e)}}
	}
	for _, p := range [][]int32{a, b} {
		if r := generate(e, context.Background(), req(p), nil); r.err != nil {
			t.Fatal(r.err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.k3prefix"))
	if len(files) != 3 { // a, the shared prefix, b
		t.Fatalf("%d files in the cache directory: %v", len(files), files)
	}

	restart := func(co engine.CacheOptions) (*engine.Engine, *bytes.Buffer) {
		var logs bytes.Buffer
		co.Logger = logTo(&logs)
		return newEngine(t, engine.Options{UBatch: 16, PrefixCache: co}), &logs
	}
	e2, _ := restart(co)
	for _, tc := range []struct {
		name   string
		p      []int32
		cached int
	}{{"new conversation", c, shared}, {"old conversation", a, len(a)}} {
		r := generate(e2, context.Background(), req(tc.p), nil)
		if r.err != nil || r.res.CachedTokens != tc.cached {
			t.Errorf("%s after a restart: cached %d, want %d (%v)", tc.name, r.res.CachedTokens, tc.cached, r.err)
		}
		want, _ := fresh(t, engine.Options{UBatch: 16}, req(tc.p))
		if d := cmp.Diff(want, r.tokens); d != "" {
			t.Errorf("%s: (-fresh +from disk)\n%s", tc.name, d)
		}
	}
	e2.Close()

	t.Run("another model", func(t *testing.T) {
		other := co
		other.Fingerprint[0] ^= 1
		other.Dir = t.TempDir()
		files, _ := filepath.Glob(filepath.Join(dir, "*.k3prefix"))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			os.WriteFile(filepath.Join(other.Dir, filepath.Base(f)), data, 0o644)
		}
		e3, logs := restart(other)
		r := generate(e3, context.Background(), req(a), nil)
		if r.err != nil || r.res.CachedTokens != 0 {
			t.Errorf("cached %d from another model's files (%v)", r.res.CachedTokens, r.err)
		}
		if !strings.Contains(logs.String(), "another model") {
			t.Errorf("no warning: %q", logs.String())
		}
		e3.Close()
	})

	// Damage every file: each conversation's entries are all broken, so
	// nothing may load.
	files, _ = filepath.Glob(filepath.Join(dir, "*.k3prefix"))
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 2 {
		case 0: // truncated
			data = data[:len(data)/2]
		case 1: // one bit flipped in the state
			data[len(data)-100] ^= 4
		}
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e4, logs := restart(co)
	for i, p := range [][]int32{c, a, b} {
		// The first request finds only damaged files; it snapshots the
		// system prompt anew, which the others may resume from.
		r := generate(e4, context.Background(), req(p), nil)
		if r.err != nil || (i == 0 && r.res.CachedTokens != 0) || (i > 0 && r.res.CachedTokens != 0 && r.res.CachedTokens != shared) {
			t.Errorf("request %d cached %d with damaged files (%v)", i, r.res.CachedTokens, r.err)
		}
		want, _ := fresh(t, engine.Options{UBatch: 16}, req(p))
		if d := cmp.Diff(want, r.tokens); d != "" {
			t.Errorf("after damaged files: (-fresh +got)\n%s", d)
		}
	}
	if n := strings.Count(logs.String(), "does not check out"); n < len(files) {
		t.Errorf("%d warnings for %d damaged files: %s", n, len(files), logs.String())
	}
	e4.Close()

	t.Run("disk bound", func(t *testing.T) {
		dir := t.TempDir()
		bound := co
		bound.Dir = dir
		e, _ := restart(bound)
		generate(e, context.Background(), req(a), nil)
		e.Close()
		files, _ := filepath.Glob(filepath.Join(dir, "*.k3prefix"))
		st, err := os.Stat(files[0])
		if err != nil {
			t.Fatal(err)
		}
		bound.DiskMax = st.Size() + st.Size()/2 // room for one entry
		e, _ = restart(bound)
		for _, p := range [][]int32{b, c} {
			generate(e, context.Background(), req(p), nil)
		}
		e.Close()
		var total int64
		files, _ = filepath.Glob(filepath.Join(dir, "*.k3prefix"))
		for _, f := range files {
			st, _ := os.Stat(f)
			total += st.Size()
		}
		if total > bound.DiskMax || len(files) == 0 {
			t.Errorf("%d files of %d bytes under a bound of %d", len(files), total, bound.DiskMax)
		}
	})
}
