package sample

import "strings"

// StopMatcher finds stop strings in streamed text. Text that could still be
// the start of a stop string is held back until the next piece decides it, so
// a stop string is never shown, however the tokens split it.
type StopMatcher struct {
	stops   []string
	held    string
	stopped bool
	matched string
}

// NewStopMatcher returns a matcher for the non-empty strings in stops.
func NewStopMatcher(stops []string) *StopMatcher {
	m := &StopMatcher{}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
		}
	}
	return m
}

// Feed takes the next piece of text. It returns what can be shown, and
// whether a stop string was found (everything from it on is dropped, and
// later calls return nothing).
func (m *StopMatcher) Feed(piece string) (emit string, stopped bool) {
	if m.stopped {
		return "", true
	}
	text := m.held + piece
	if i, stop := m.earliest(text); i >= 0 {
		m.held, m.stopped, m.matched = "", true, stop
		return text[:i], true
	}
	h := m.holdFrom(text)
	m.held = text[h:]
	return text[:h], false
}

// Matched is the stop string that was found, "" while none was.
func (m *StopMatcher) Matched() string { return m.matched }

// Flush releases held-back text when generation ends for another reason.
func (m *StopMatcher) Flush() string {
	h := m.held
	m.held = ""
	return h
}

// earliest is where the stop string that ends first begins (the longer one
// when two end together), or -1. Deciding by the end, which is where a
// streamed match completes, makes the result independent of how the text
// was split into pieces.
func (m *StopMatcher) earliest(text string) (int, string) {
	start, end, stop := -1, 0, ""
	for _, s := range m.stops {
		i := strings.Index(text, s)
		if i < 0 {
			continue
		}
		if e := i + len(s); start < 0 || e < end || (e == end && i < start) {
			start, end, stop = i, e, s
		}
	}
	return start, stop
}

// holdFrom is where the longest suffix of text that is a proper prefix of a
// stop string begins (len(text) when there is none).
func (m *StopMatcher) holdFrom(text string) int {
	from := len(text)
	for _, s := range m.stops {
		for n := min(len(s)-1, len(text)); n > 0; n-- {
			if len(text)-n >= from {
				break // a longer hold was already found
			}
			if strings.HasSuffix(text, s[:n]) {
				from = len(text) - n
				break
			}
		}
	}
	return from
}

// FinishReason says why generation ended, in OpenAI's words.
type FinishReason string

const (
	FinishStop   FinishReason = "stop"   // end-of-generation token or stop string
	FinishLength FinishReason = "length" // max tokens reached
)

// Stopper decides when a generation ends: an end-of-generation token, a stop
// string, or the token limit.
type Stopper struct {
	max   int
	eog   map[int32]bool
	match *StopMatcher
	n     int
	done  bool
}

// NewStopper ends generation after maxTokens tokens (0: no limit), at any
// token of eog, or at any of the stop strings.
func NewStopper(maxTokens int, eog []int32, stops []string) *Stopper {
	s := &Stopper{max: maxTokens, eog: map[int32]bool{}, match: NewStopMatcher(stops)}
	for _, t := range eog {
		s.eog[t] = true
	}
	return s
}

// IsEOG reports whether tok ends generation.
func (s *Stopper) IsEOG(tok int32) bool { return s.eog[tok] }

// Next takes a generated token and its text. It returns the text to show and,
// when generation is over, done with the reason. An end-of-generation token's
// text is never shown; text held for a possible stop string is released when
// the limit ends generation.
func (s *Stopper) Next(tok int32, piece string) (emit string, done bool, reason FinishReason) {
	if s.done {
		return "", true, ""
	}
	s.n++
	if s.eog[tok] {
		s.done = true
		return s.match.Flush(), true, FinishStop
	}
	emit, stopped := s.match.Feed(piece)
	if stopped {
		s.done = true
		return emit, true, FinishStop
	}
	if s.max > 0 && s.n >= s.max {
		s.done = true
		return emit + s.match.Flush(), true, FinishLength
	}
	return emit, false, ""
}

// Tokens is how many tokens Next has seen.
func (s *Stopper) Tokens() int { return s.n }
