package grammar

import (
	"fmt"
	"strings"
	"unicode"
)

// kind is the type of a rule element.
type kind uint8

const (
	kEnd      kind = iota // end of a rule (and of its last alternative)
	kAlt                  // end of an alternative; another follows
	kRef                  // reference to rule val
	kChars                // one character of class val
	kToken                // the token whose id is val
	kNotToken             // any token but val
)

type elem struct {
	kind kind
	val  int32
}

// span is an inclusive range of code points.
type span struct{ lo, hi rune }

// class is a set of code points: the union of its spans, or everything
// outside them when neg (so "." is a negated class without spans).
type class struct {
	neg   bool
	spans []span
}

func (c *class) match(r rune) bool {
	for _, s := range c.spans {
		if s.lo <= r && r <= s.hi {
			return !c.neg
		}
	}
	return c.neg
}

// matchRange reports whether some code point in [lo, hi] is in the class.
func (c *class) matchRange(lo, hi rune) bool {
	if !c.neg {
		for _, s := range c.spans {
			if s.lo <= hi && lo <= s.hi {
				return true
			}
		}
		return false
	}
	// Negated: is some point of [lo, hi] outside every span? Walk lo up past
	// the spans that cover it.
	for moved := true; moved && lo <= hi; {
		moved = false
		for _, s := range c.spans {
			if s.lo <= lo && lo <= s.hi {
				lo, moved = s.hi+1, true
			}
		}
	}
	return lo <= hi
}

// Grammar is a parsed grammar: its rules as one flat list of elements,
// each rule a run of alternatives separated by kAlt and closed by kEnd.
type Grammar struct {
	elems   []elem
	start   []int32 // start[r] is the first element of rule r
	names   []string
	classes []class
	root    int32
}

// Rules is the number of rules (those the parser made for groups and
// repetitions included).
func (g *Grammar) Rules() int { return len(g.start) }

func (g *Grammar) endOfSeq(pos int32) bool {
	k := g.elems[pos].kind
	return k == kEnd || k == kAlt
}

// alts calls f with the first element of each alternative of rule r.
func (g *Grammar) alts(r int32, f func(pos int32)) {
	pos := g.start[r]
	for {
		f(pos)
		for !g.endOfSeq(pos) {
			pos++
		}
		if g.elems[pos].kind == kEnd {
			return
		}
		pos++
	}
}

// String writes the grammar back as GBNF (generated rules included), one
// rule per line.
func (g *Grammar) String() string {
	var b strings.Builder
	for r := range g.start {
		b.WriteString(g.names[r] + " ::=")
		empty := true // the alternative so far has no element
		for pos := g.start[r]; ; pos++ {
			e := g.elems[pos]
			if empty && (e.kind == kEnd || e.kind == kAlt) {
				b.WriteString(` ""`)
			}
			empty = e.kind == kAlt
			switch e.kind {
			case kEnd:
				b.WriteString("\n")
			case kAlt:
				b.WriteString(" |")
			case kRef:
				b.WriteString(" " + g.names[e.val])
			case kChars:
				b.WriteString(" " + g.classes[e.val].String())
			case kToken:
				fmt.Fprintf(&b, " <[%d]>", e.val)
			case kNotToken:
				fmt.Fprintf(&b, " !<[%d]>", e.val)
			}
			if e.kind == kEnd {
				break
			}
		}
	}
	return b.String()
}

func (c *class) String() string {
	if c.neg && len(c.spans) == 0 {
		return "."
	}
	var b strings.Builder
	b.WriteString("[")
	if c.neg {
		b.WriteString("^")
	}
	for _, s := range c.spans {
		b.WriteString(classChar(s.lo))
		if s.hi != s.lo {
			b.WriteString("-" + classChar(s.hi))
		}
	}
	b.WriteString("]")
	return b.String()
}

func classChar(r rune) string {
	switch {
	case r == '\\' || r == ']' || r == '-' || r == '"' || r == '[':
		return `\` + string(r)
	case r == '^':
		// GBNF (llama.cpp's parser too) has no \^ escape; a hex escape is
		// a literal caret anywhere, even first in the class.
		return `\x5E`
	case r < 0x20 || r == 0x7f:
		return `\x` + fmt.Sprintf("%02X", r)
	case !unicode.IsPrint(r):
		return `\U` + fmt.Sprintf("%08X", r)
	}
	return string(r)
}
