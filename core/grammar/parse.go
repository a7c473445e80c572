package grammar

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Options configure Parse.
type Options struct {
	// Root names the start rule; "" means "root".
	Root string
	// Token resolves a <text> token reference to the id of the one token
	// whose text it is; nil allows only the <[id]> form.
	Token func(text string) (int32, bool)
}

// Limits that keep a hostile grammar from exhausting memory; the
// repetition limits are llama.cpp's.
const (
	maxRepetition = 2000    // {m,n} counts; past this n means unbounded
	maxElems      = 1 << 20 // elements of all rules together
	maxDepth      = 200     // nested groups
)

// Error is a grammar that does not parse, with where.
type Error struct {
	Line, Col int // 1-based; 0 when the error is about the whole grammar
	Msg       string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return "grammar: " + e.Msg
	}
	return fmt.Sprintf("grammar: line %d col %d: %s", e.Line, e.Col, e.Msg)
}

type parser struct {
	src     string
	pos     int
	o       Options
	ids     map[string]int32
	names   []string
	rules   [][]elem // nil until defined
	classes []class
	classID map[string]int32
	nelems  int
}

// Parse parses GBNF text.
func Parse(src string, o Options) (g *Grammar, err error) {
	if o.Root == "" {
		o.Root = "root"
	}
	p := &parser{src: src, o: o, ids: map[string]int32{}, classID: map[string]int32{}}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*Error)
			if !ok {
				panic(r)
			}
			g, err = nil, e
		}
	}()
	p.space(true)
	for p.pos < len(p.src) {
		p.rule()
	}
	return p.finish()
}

// fail stops parsing with an error at the current position.
func (p *parser) fail(format string, args ...any) {
	line, col := 1, 1
	for _, r := range p.src[:min(p.pos, len(p.src))] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	panic(&Error{Line: line, Col: col, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) peek() byte {
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

func (p *parser) at(s string) bool { return strings.HasPrefix(p.src[p.pos:], s) }

// space skips blanks and comments, and newlines when newlines is set.
func (p *parser) space(newlines bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t':
			p.pos++
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
				p.pos++
			}
		case newlines && (c == '\n' || c == '\r'):
			p.pos++
		default:
			return
		}
	}
}

func isWordChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-'
}

func (p *parser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isWordChar(p.src[p.pos]) {
		p.pos++
	}
	if p.pos == start {
		if p.pos >= len(p.src) {
			p.fail("expected a rule name, found the end of the grammar")
		}
		p.fail("expected a rule name, found %q", p.rest())
	}
	return p.src[start:p.pos]
}

// rest is a short quote of the text at the current position.
func (p *parser) rest() string {
	s := p.src[p.pos:]
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 20 {
		s = s[:20] + "..."
	}
	return s
}

func (p *parser) symbol(name string) int32 {
	if id, ok := p.ids[name]; ok {
		return id
	}
	id := int32(len(p.names))
	p.ids[name] = id
	p.names = append(p.names, name)
	p.rules = append(p.rules, nil)
	return id
}

// generated makes a new rule for a group or repetition inside base.
func (p *parser) generated(base string) int32 {
	for n := len(p.names); ; n++ {
		if name := base + "-" + strconv.Itoa(n); p.ids[name] == 0 && name != p.names[0] {
			return p.symbol(name)
		}
	}
}

func (p *parser) define(id int32, rule []elem) {
	p.nelems += len(rule)
	if p.nelems > maxElems {
		p.fail("the grammar is too large (more than %d elements after expanding repetitions)", maxElems)
	}
	p.rules[id] = rule
}

func (p *parser) rule() {
	name := p.name()
	p.space(false)
	id := p.symbol(name)
	if p.rules[id] != nil {
		p.fail("rule %q is defined twice", name)
	}
	if !p.at("::=") {
		p.fail("expected ::= after %q", name)
	}
	p.pos += 3
	p.space(true)
	p.alternates(name, id, false, 0)
	switch {
	case p.at("\r\n"):
		p.pos += 2
	case p.at("\n") || p.at("\r"):
		p.pos++
	case p.pos < len(p.src):
		p.fail("expected a newline or the end of the grammar, found %q", p.rest())
	}
	p.space(true)
}

func (p *parser) alternates(name string, id int32, nested bool, depth int) {
	if depth > maxDepth {
		p.fail("groups are nested more than %d deep", maxDepth)
	}
	var rule []elem
	rule = p.sequence(name, rule, nested, depth)
	for p.peek() == '|' {
		rule = append(rule, elem{kind: kAlt})
		p.pos++
		p.space(true)
		rule = p.sequence(name, rule, nested, depth)
	}
	p.define(id, append(rule, elem{kind: kEnd}))
}

func (p *parser) sequence(name string, rule []elem, nested bool, depth int) []elem {
	last := len(rule) // where the last symbol starts
	prevRules := 1    // rules the last symbol stands for (llama.cpp's n_prev_rules)
	symbol := func() { last, prevRules = len(rule), 1 }
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '"':
			p.pos++
			symbol()
			for p.peek() != '"' {
				if p.pos >= len(p.src) {
					p.fail("unterminated string literal")
				}
				r := p.char()
				rule = append(rule, elem{kind: kChars, val: p.class(class{spans: []span{{r, r}}})})
			}
			p.pos++
			p.space(nested)
		case c == '[':
			p.pos++
			symbol()
			rule = append(rule, elem{kind: kChars, val: p.class(p.charClass())})
			p.space(nested)
		case c == '<' || c == '!':
			k := kToken
			if c == '!' {
				k = kNotToken
				p.pos++
			}
			symbol()
			rule = append(rule, elem{kind: k, val: p.token()})
			p.space(nested)
		case isWordChar(c):
			ref := p.symbol(p.name())
			p.space(nested)
			symbol()
			rule = append(rule, elem{kind: kRef, val: ref})
		case c == '(':
			p.pos++
			p.space(true)
			before := len(p.names)
			sub := p.generated(name)
			p.alternates(name, sub, true, depth+1)
			prevRules = max(1, len(p.names)-before)
			last = len(rule)
			rule = append(rule, elem{kind: kRef, val: sub})
			if p.peek() != ')' {
				if p.pos >= len(p.src) {
					p.fail("expected ')', found the end of the grammar")
				}
				p.fail("expected ')', found %q", p.rest())
			}
			p.pos++
			p.space(nested)
		case c == '.':
			p.pos++
			symbol()
			rule = append(rule, elem{kind: kChars, val: p.class(class{neg: true})})
			p.space(nested)
		case c == '*' || c == '+' || c == '?':
			p.pos++
			p.space(nested)
			lo, hi := 0, -1
			if c == '+' {
				lo = 1
			} else if c == '?' {
				hi = 1
			}
			rule = p.repeat(name, rule, last, &prevRules, lo, hi)
		case c == '{':
			p.pos++
			p.space(nested)
			lo := p.int()
			hi := lo
			p.space(nested)
			switch p.peek() {
			case '}':
			case ',':
				p.pos++
				p.space(nested)
				hi = -1
				if d := p.peek(); '0' <= d && d <= '9' {
					hi = p.int()
					p.space(nested)
				}
				if p.peek() != '}' {
					p.fail("expected '}' in a repetition, found %q", p.rest())
				}
			default:
				p.fail("expected ',' or '}' in a repetition, found %q", p.rest())
			}
			p.pos++
			p.space(nested)
			if lo > maxRepetition {
				p.fail("a repetition of at least %d exceeds the limit of %d", lo, maxRepetition)
			}
			if hi > maxRepetition {
				hi = -1
			}
			if hi >= 0 && hi < lo {
				p.fail("repetition {%d,%d}: the maximum is below the minimum", lo, hi)
			}
			rule = p.repeat(name, rule, last, &prevRules, lo, hi)
		default:
			return rule
		}
	}
	return rule
}

func (p *parser) int() int {
	start := p.pos
	for p.pos < len(p.src) && '0' <= p.src[p.pos] && p.src[p.pos] <= '9' {
		p.pos++
	}
	if p.pos == start {
		p.fail("expected an integer, found %q", p.rest())
	}
	n, err := strconv.Atoi(p.src[start:p.pos])
	if err != nil || n > 1<<30 {
		p.fail("integer %s is too large", p.src[start:p.pos])
	}
	return n
}

// repeat rewrites the symbol at rule[last:] as repeated lo to hi times (hi
// < 0: no maximum), as llama.cpp does: S{m,n} is m copies of S followed by
// n-m nested optional copies, S{m,} is m copies and a rule S' ::= S S' | .
func (p *parser) repeat(name string, rule []elem, last int, prevRules *int, lo, hi int) []elem {
	if last == len(rule) {
		p.fail("'*', '+', '?' or '{' must follow a symbol")
	}
	total := 1
	if hi > 0 {
		total = hi
	} else if lo > 0 {
		total = lo
	}
	if *prevRules*total >= maxRepetition {
		p.fail("the repetition makes too many rules; reduce the count or nest less")
	}
	sym := append([]elem(nil), rule[last:]...)
	if lo == 0 {
		rule = rule[:last]
	} else {
		for i := 1; i < lo; i++ {
			rule = append(rule, sym...)
		}
	}
	opt := 1
	if hi >= 0 {
		opt = hi - lo
	}
	var prev int32 = -1
	for i := 0; i < opt; i++ {
		id := p.generated(name)
		r := append([]elem(nil), sym...)
		switch {
		case hi < 0:
			r = append(r, elem{kind: kRef, val: id})
		case prev >= 0:
			r = append(r, elem{kind: kRef, val: prev})
		}
		p.define(id, append(r, elem{kind: kAlt}, elem{kind: kEnd}))
		prev = id
	}
	if opt > 0 {
		rule = append(rule, elem{kind: kRef, val: prev})
	}
	*prevRules *= total
	return rule
}

// char reads one character of a literal or class: an escape or a UTF-8
// sequence.
func (p *parser) char() rune {
	if p.peek() == '\\' {
		if p.pos+1 >= len(p.src) {
			p.fail("unterminated escape")
		}
		e := p.src[p.pos+1]
		p.pos += 2
		switch e {
		case 'x':
			return p.hex(2)
		case 'u':
			return p.hex(4)
		case 'U':
			return p.hex(8)
		case 't':
			return '\t'
		case 'r':
			return '\r'
		case 'n':
			return '\n'
		case '\\', '"', '[', ']', '-':
			return rune(e)
		}
		p.pos -= 2
		p.fail("unknown escape %q", p.src[p.pos:p.pos+2])
	}
	r, n := utf8.DecodeRuneInString(p.src[p.pos:])
	if r == utf8.RuneError && n <= 1 {
		p.fail("invalid UTF-8")
	}
	p.pos += n
	return r
}

func (p *parser) hex(n int) rune {
	if p.pos+n > len(p.src) {
		p.fail("expected %d hex digits", n)
	}
	v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
	if err != nil || strings.ContainsAny(p.src[p.pos:p.pos+n], "+-") {
		p.fail("expected %d hex digits, found %q", n, p.src[p.pos:p.pos+n])
	}
	p.pos += n
	return rune(v)
}

// charClass reads a class after its '['.
func (p *parser) charClass() class {
	var c class
	if p.peek() == '^' {
		c.neg = true
		p.pos++
	}
	for p.peek() != ']' {
		if p.pos >= len(p.src) {
			p.fail("unterminated character class")
		}
		lo := p.char()
		hi := lo
		if p.peek() == '-' && p.pos+1 < len(p.src) && p.src[p.pos+1] != ']' {
			p.pos++
			hi = p.char()
		}
		c.spans = append(c.spans, span{lo, hi})
	}
	p.pos++
	return c
}

// class returns the index of c in the class table, adding it if new.
func (p *parser) class(c class) int32 {
	key := c.String()
	if id, ok := p.classID[key]; ok {
		return id
	}
	id := int32(len(p.classes))
	p.classes = append(p.classes, c)
	p.classID[key] = id
	return id
}

// token reads <[id]> or <text>.
func (p *parser) token() int32 {
	if p.peek() != '<' {
		p.fail("expected '<' after '!', found %q", p.rest())
	}
	start := p.pos
	p.pos++
	if p.peek() == '[' {
		p.pos++
		id := p.int()
		if !p.at("]>") {
			p.fail("expected ]> after a token id, found %q", p.rest())
		}
		p.pos += 2
		return int32(id)
	}
	end := strings.IndexByte(p.src[p.pos:], '>')
	if end < 0 {
		p.fail("unterminated token reference")
	}
	p.pos += end + 1
	text := p.src[start:p.pos]
	if p.o.Token == nil {
		p.pos = start
		p.fail("token %s: no vocabulary to look it up in (use <[id]>)", text)
	}
	id, ok := p.o.Token(text)
	if !ok {
		p.pos = start
		p.fail("token %s is not one token of the vocabulary", text)
	}
	return id
}

// finish checks the rules and flattens them into a Grammar.
func (p *parser) finish() (*Grammar, error) {
	root, ok := p.ids[p.o.Root]
	if !ok || p.rules[root] == nil {
		return nil, &Error{Msg: fmt.Sprintf("the grammar has no %q rule", p.o.Root)}
	}
	for id, r := range p.rules {
		if r == nil {
			return nil, &Error{Msg: fmt.Sprintf("rule %q is used but not defined", p.names[id])}
		}
	}
	g := &Grammar{names: p.names, classes: p.classes, root: root, start: make([]int32, len(p.rules))}
	for id, r := range p.rules {
		g.start[id] = int32(len(g.elems))
		g.elems = append(g.elems, r...)
	}
	if r, ok := g.leftRecursion(); ok {
		return nil, &Error{Msg: fmt.Sprintf("rule %q is left-recursive (it can reach itself without consuming a character); rewrite it with repetition", g.names[r])}
	}
	return g, nil
}

// leftRecursion finds a rule that can reach itself through leftmost
// references (each before it able to match nothing).
func (g *Grammar) leftRecursion() (int32, bool) {
	n := len(g.start)
	empty := make([]bool, n) // may match the empty string (a fixed point)
	for changed := true; changed; {
		changed = false
		for r := range n {
			if empty[r] {
				continue
			}
			g.alts(int32(r), func(pos int32) {
				all := true
				for ; !g.endOfSeq(pos); pos++ {
					if e := g.elems[pos]; e.kind != kRef || !empty[e.val] {
						all = false
						break
					}
				}
				if all && !empty[r] {
					empty[r], changed = true, true
				}
			})
		}
	}
	// state: 0 unvisited, 1 in progress, 2 done
	state := make([]uint8, n)
	var visit func(r int32) (int32, bool)
	visit = func(r int32) (int32, bool) {
		if state[r] == 1 {
			return r, true
		}
		if state[r] == 2 {
			return 0, false
		}
		state[r] = 1
		var found int32
		bad := false
		g.alts(r, func(pos int32) {
			for ; !bad && !g.endOfSeq(pos); pos++ {
				e := g.elems[pos]
				if e.kind != kRef {
					break
				}
				if x, ok := visit(e.val); ok {
					found, bad = x, true
					return
				}
				if !empty[e.val] {
					break
				}
			}
		})
		if bad {
			return found, true
		}
		state[r] = 2
		return 0, false
	}
	for r := range n {
		if x, ok := visit(int32(r)); ok {
			return x, true
		}
	}
	return 0, false
}
