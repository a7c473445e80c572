package moe

import (
	"math"
	"testing"
)

// TestRoutingStats: precision by rank, reuse and popularity on routings
// whose values are known.
func TestRoutingStats(t *testing.T) {
	s := NewRoutingStats()
	// Layer 1, two tokens of 2 experts out of 4; each guessed beforehand
	// with the top guess right and the second wrong.
	s.Guess(1, []int32{0, 3})
	s.Chosen(1, 4, []int32{0, 1})
	s.Guess(1, []int32{1, 0})
	s.Chosen(1, 4, []int32{1, 2}) // reuses expert 1 of the token before
	got := s.Summary()
	if got.Guesses != 2 || len(got.PrecisionAt) != 2 || got.PrecisionAt[0] != 1 || got.PrecisionAt[1] != 0.5 {
		t.Errorf("precision %+v", got)
	}
	if got.Reuse != 0.5 {
		t.Errorf("reuse %g, want 0.5", got.Reuse)
	}
	// counts 1,2,1,0: mean 1, sd sqrt(0.5)
	if math.Abs(got.PopularityCV-math.Sqrt(0.5)) > 1e-9 || got.PopularityMax != 2 {
		t.Errorf("popularity cv %g max %g", got.PopularityCV, got.PopularityMax)
	}
	if got.UniformCV <= 0 {
		t.Errorf("uniform cv %g", got.UniformCV)
	}
}
