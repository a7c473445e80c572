package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestInspectRouting: k3 inspect --routing runs the model token by token
// and reports a guess scored for every MoE layer after the first token's,
// precision by rank, reuse and popularity within their ranges.
func TestInspectRouting(t *testing.T) {
	path, cfg := stageModel(t)
	var out, errb bytes.Buffer
	if code := runMain([]string{"inspect", path, "--routing", "12", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep routingReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	moeLayers := cfg.NLayer - cfg.NDense
	// Each MoE layer is guessed after the layer before it (the first
	// after the dense lead layer).
	if want := int64(12 * moeLayers); rep.Tokens != 12 || rep.Guesses != want {
		t.Errorf("%d tokens, %d guesses scored, want 12 and %d", rep.Tokens, rep.Guesses, want)
	}
	if len(rep.PrecisionAt) != cfg.NExpertUsed || rep.Reuse < 0 || rep.Reuse > 1 || rep.PopularityCV < 0 {
		t.Errorf("report %+v", rep)
	}
	for k, p := range rep.PrecisionAt {
		if p < 0 || p > 1 {
			t.Errorf("precision at %d: %g", k+1, p)
		}
	}
	if code := runMain([]string{"inspect", path, "--routing", "-1"}, &out, &errb); code == 0 {
		t.Error("--routing -1 accepted")
	}
}

// TestRealisticRouting: k3 synth --routing realistic writes routers whose
// statistics, as k3 inspect --routing measures them over a short prompt,
// fall in bands around Kimi K3's published ones (lookahead precision 0.92 /
// 0.81 / 0.59 for the top-1 / 6 / 16 guess, next-token reuse ~0.30), while
// the random routers of the same shapes guess the top 16 far better than
// K3 and reuse less.
func TestRealisticRouting(t *testing.T) {
	dir := t.TempDir()
	measure := func(routing string) routingReport {
		path := filepath.Join(dir, routing+".gguf")
		var out, errb bytes.Buffer
		// 128 experts, 16 used, as the issue-17 bench model routes
		if code := runMain([]string{"synth", "--preset", "tiny", "--type", "q8_0", "--n-expert", "128", "--n-expert-used", "16",
			"--n-ff-exp", "64", "--n-head", "8", "--routing", routing, "-o", path}, &out, &errb); code != 0 {
			t.Fatalf("synth: exit %d: %s", code, errb.String())
		}
		out.Reset()
		if code := runMain([]string{"inspect", path, "--routing", "64", "--json"}, &out, &errb); code != 0 {
			t.Fatalf("inspect: exit %d: %s", code, errb.String())
		}
		var rep routingReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		t.Logf("%s: precision top-1 %.3f top-6 %.3f top-16 %.3f, reuse %.3f, popularity CV %.3f (uniform %.3f)", routing,
			rep.PrecisionAt[0], rep.PrecisionAt[5], rep.PrecisionAt[15], rep.Reuse, rep.PopularityCV, rep.UniformCV)
		return rep
	}
	real := measure("realistic")
	bands := []struct {
		name   string
		v      float64
		lo, hi float64
	}{
		{"top-1 precision", real.PrecisionAt[0], 0.85, 0.98},
		{"top-6 precision", real.PrecisionAt[5], 0.73, 0.89},
		{"top-16 precision", real.PrecisionAt[15], 0.52, 0.67},
		{"next-token reuse", real.Reuse, 0.18, 0.40},
		// sampling over 64 tokens and a few layers, and the reuse itself,
		// spread the counts beyond uniform's; no expert may dominate
		{"popularity CV over uniform's", real.PopularityCV / real.UniformCV, 0, 3},
	}
	for _, b := range bands {
		if b.v < b.lo || b.v > b.hi {
			t.Errorf("realistic %s %.3f, want [%g, %g]", b.name, b.v, b.lo, b.hi)
		}
	}
	if rnd := measure("random"); rnd.PrecisionAt[15] < 0.75 {
		t.Errorf("random routers' top-16 precision %.3f: the bands above no longer tell them apart", rnd.PrecisionAt[15])
	}
}
