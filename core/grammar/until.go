package grammar

import (
	"strconv"
	"strings"
)

// Literal is GBNF for the exact text s.
func Literal(s string) string { return literal(s) }

// Until adds to b the rules of name: any text that does not contain
// marker, followed by marker (free text up to a closing tag). The rules
// are the states of a Knuth-Morris-Pratt matcher of marker: state i has
// matched marker[:i]; a character either extends the match or falls back.
func (b *SchemaBuilder) Until(name, marker string) string {
	m := []rune(marker)
	if len(m) == 0 {
		return b.add(name, `""`)
	}
	// fail[i]: the longest proper border of m[:i].
	fail := make([]int, len(m)+1)
	for i := 1; i < len(m); i++ {
		k := fail[i]
		for k > 0 && m[k] != m[i] {
			k = fail[k]
		}
		if m[k] == m[i] {
			k++
		}
		fail[i+1] = k
	}
	next := func(i int, c rune) int {
		for i > 0 && m[i] != c {
			i = fail[i]
		}
		if m[i] == c {
			i++
		}
		return i
	}
	state := func(i int) string {
		if i == 0 {
			return name
		}
		return name + "-" + strconv.Itoa(i)
	}
	for i := range m {
		// Group the characters that lead somewhere other than state 0.
		var alts []string
		seen := map[rune]bool{}
		var chars []rune
		for j := 0; j <= i; j++ {
			c := m[j]
			if seen[c] {
				continue
			}
			seen[c] = true
			chars = append(chars, c)
			to := next(i, c)
			switch {
			case to == len(m):
				alts = append(alts, "["+classChar(c)+"]")
			case to == 0:
				seen[c] = false // falls back like any other character
				chars = chars[:len(chars)-1]
			default:
				alts = append(alts, "["+classChar(c)+"] "+state(to))
			}
		}
		var other strings.Builder
		for _, c := range chars {
			other.WriteString(classChar(c))
		}
		if other.Len() == 0 {
			alts = append(alts, ". "+state(0))
		} else {
			alts = append(alts, "[^"+other.String()+"] "+state(0))
		}
		b.rules[state(i)] = strings.Join(alts, " | ")
	}
	return name
}
