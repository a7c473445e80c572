package server

import (
	"math"
	"testing"

	"github.com/k3-inference/k3/core/grammar"
)

// TestGrammarMaskTrigger: a lazy grammar constrains nothing until the
// generated text holds the trigger, even split across tokens, then holds
// what follows it (the trigger token's own tail included).
func TestGrammarMaskTrigger(t *testing.T) {
	pieces := []string{"a", "<ca", "ll>", "x", "1", "2", "</s>", "ll>1"}
	v := grammar.NewVocab(pieces, []int32{6})
	g, err := grammar.Parse(`root ::= [0-9]+ "x"`, grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	allowed := func(mask func([]int32, []float32), gen []int32) []int {
		logits := make([]float32, len(pieces))
		mask(gen, logits)
		var out []int
		for i, l := range logits {
			if !math.IsInf(float64(l), -1) {
				out = append(out, i)
			}
		}
		return out
	}
	mask := grammarMask(v, g, "<call>")
	if got := allowed(mask, []int32{0, 1}); len(got) != len(pieces) {
		t.Fatalf("before the trigger: %v allowed, want all", got)
	}
	if got := allowed(mask, []int32{0, 1, 2}); len(got) != 2 || got[0] != 4 || got[1] != 5 {
		t.Fatalf("right after the trigger: %v, want the digits", got)
	}
	mask = grammarMask(v, g, "<call>")
	if got := allowed(mask, []int32{1, 7}); len(got) != 3 { // digits and x
		t.Fatalf("after a token holding the trigger and a digit: %v", got)
	}
}
