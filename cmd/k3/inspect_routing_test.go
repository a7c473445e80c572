package main

import (
	"bytes"
	"encoding/json"
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
