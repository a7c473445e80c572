package sample

import (
	"strings"
	"testing"
)

// splits returns every way to cut s into non-empty consecutive pieces
// (2^(len-1) of them).
func splits(s string) [][]string {
	if len(s) <= 1 {
		return [][]string{{s}}
	}
	var out [][]string
	for mask := 0; mask < 1<<(len(s)-1); mask++ {
		var pieces []string
		start := 0
		for i := 1; i < len(s); i++ {
			if mask&(1<<(i-1)) != 0 {
				pieces = append(pieces, s[start:i])
				start = i
			}
		}
		out = append(out, append(pieces, s[start:]))
	}
	return out
}

// TestStopStringsEverySplit feeds each text cut into pieces in every possible
// way: what is shown, and whether it stopped, must not depend on the cuts,
// and no piece of a stop string may be shown.
func TestStopStringsEverySplit(t *testing.T) {
	tests := []struct {
		name, text string
		stops      []string
		want       string
		stopped    bool
	}{
		{"stop in the middle", "Hi STOP you", []string{"STOP"}, "Hi ", true},
		{"stop at the start", "STOPxyz", []string{"STOP"}, "", true},
		{"stop at the end", "abcSTOP", []string{"STOP"}, "abc", true},
		{"near miss released", "Hi STOmp STO", []string{"STOP"}, "Hi STOmp STO", false},
		{"repeated prefix", "SSSTOPx", []string{"STOP"}, "SS", true},
		{"two stops, first to end wins", "ab</s>cd###", []string{"###", "</s>"}, "ab", true},
		{"overlapping stops end together", "xxabcd", []string{"bcd", "abcd"}, "xx", true},
		{"shorter stop ends first", "abcdX", []string{"abcdX", "cd"}, "ab", true},
		{"multi-byte", "héllo wörld", []string{"wö"}, "héllo ", true},
		{"no stops", "plain text", nil, "plain text", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, pieces := range splits(tc.text) {
				m := NewStopMatcher(tc.stops)
				var shown strings.Builder
				stopped := false
				for _, p := range pieces {
					e, s := m.Feed(p)
					shown.WriteString(e)
					for _, st := range tc.stops {
						if strings.Contains(shown.String(), st) {
							t.Fatalf("pieces %q: showed stop string %q in %q", pieces, st, shown.String())
						}
					}
					if s {
						stopped = true
					}
				}
				if !stopped {
					shown.WriteString(m.Flush())
				}
				if shown.String() != tc.want || stopped != tc.stopped {
					t.Fatalf("pieces %q: shown %q stopped %v, want %q %v", pieces, shown.String(), stopped, tc.want, tc.stopped)
				}
			}
		})
	}
}

func TestStopMatcherHoldsOnlyPossiblePrefixes(t *testing.T) {
	m := NewStopMatcher([]string{"</end>"})
	if e, _ := m.Feed("text </e"); e != "text " {
		t.Fatalf("shown %q, want the text before the possible stop", e)
	}
	if e, _ := m.Feed("xtra"); e != "</extra" {
		t.Fatalf("shown %q, want the held text released", e)
	}
	if e, s := m.Feed("</end> more"); e != "" || !s {
		t.Fatalf("got %q %v, want a stop", e, s)
	}
	if e, s := m.Feed("after"); e != "" || !s {
		t.Fatal("text after a stop must not be shown")
	}
}

// TestStopMatcherMatched: Matched names the stop string that ended the
// text (the one that ends first, the longer of two that end together), and
// nothing before a stop.
func TestStopMatcherMatched(t *testing.T) {
	m := NewStopMatcher([]string{"long stop", "stop"})
	m.Feed("a long st")
	if got := m.Matched(); got != "" {
		t.Fatalf("Matched %q before any stop", got)
	}
	if _, s := m.Feed("op"); !s || m.Matched() != "long stop" {
		t.Fatalf("stopped %v, Matched %q, want \"long stop\" (it ends with \"stop\" and is longer)", s, m.Matched())
	}
	m = NewStopMatcher([]string{"long stop", "lo"})
	if _, s := m.Feed("a long stop"); !s || m.Matched() != "lo" {
		t.Fatalf("stopped %v, Matched %q, want \"lo\" (it ends first)", s, m.Matched())
	}
}

func TestStopper(t *testing.T) {
	type step struct {
		tok   int32
		piece string
	}
	tests := []struct {
		name   string
		max    int
		steps  []step
		want   string
		reason FinishReason
		tokens int
	}{
		{"eog token", 0, []step{{1, "Hello"}, {2, " wor"}, {99, "<eos>"}, {3, "never"}}, "Hello wor", FinishStop, 3},
		{"stop string across tokens", 0, []step{{1, "The end"}, {2, "##"}, {3, "#"}, {4, "more"}}, "The end", FinishStop, 3},
		{"max tokens releases held text", 3, []step{{1, "a"}, {2, "b#"}, {3, "#"}, {4, "c"}}, "ab##", FinishLength, 3},
		{"eog releases held text", 0, []step{{1, "x#"}, {99, ""}}, "x#", FinishStop, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStopper(tc.max, []int32{99, 100}, []string{"###"})
			var shown string
			var reason FinishReason
			for _, st := range tc.steps {
				e, done, r := s.Next(st.tok, st.piece)
				shown += e
				if done {
					reason = r
					break
				}
			}
			if shown != tc.want || reason != tc.reason || s.Tokens() != tc.tokens {
				t.Fatalf("shown %q reason %q tokens %d; want %q %q %d", shown, reason, s.Tokens(), tc.want, tc.reason, tc.tokens)
			}
			if !s.IsEOG(100) || s.IsEOG(1) {
				t.Fatal("IsEOG disagrees with the configured set")
			}
		})
	}
}
