package chat

import "unicode/utf8"

// A small PEG with the semantics of llama.cpp's common/peg-parser.cpp in its
// lenient mode, the only mode common_chat_parse uses: input that ends where
// more could follow (a literal cut short, an open string, a number whose
// next character could extend it) is "need more" instead of failure, and
// parsing stops there with what it matched. The reply formats llama.cpp
// builds from these parsers (common/chat.cpp, chat-auto-parser-generator.cpp)
// are built here from the same pieces, so a reply splits into reasoning,
// content and tool calls exactly where llama.cpp splits it, streamed or not.

type pegStatus uint8

// A failure's end is where the input stopped making sense (an invalid
// byte, a character no alternative takes): close's search for the longest
// prefix that parses starts there once it has tried enough prefixes from
// the end.
const (
	pegFail pegStatus = iota
	pegOK
	pegMore // input ended where more could follow
)

// pegNode is a tagged span: the reply's pieces (reasoning, content, a tool's
// name or arguments) are tags around what matched them.
type pegNode struct {
	tag      string
	text     string
	children []*pegNode
}

type pegResult struct {
	status pegStatus
	end    int
	nodes  []*pegNode
}

type peg func(in string, pos int) pegResult

func pegLit(s string) peg {
	return func(in string, pos int) pegResult {
		for i := 0; i < len(s); i++ {
			if pos+i >= len(in) {
				return pegResult{status: pegMore, end: pos + i}
			}
			if in[pos+i] != s[i] {
				return pegResult{status: pegFail, end: pos}
			}
		}
		return pegResult{status: pegOK, end: pos + len(s)}
	}
}

func pegEps(in string, pos int) pegResult { return pegResult{status: pegOK, end: pos} }

func pegEnd(in string, pos int) pegResult {
	if pos >= len(in) {
		return pegResult{status: pegOK, end: pos}
	}
	return pegResult{status: pegFail, end: pos}
}

func pegSeq(ps ...peg) peg {
	return func(in string, pos int) pegResult {
		var nodes []*pegNode
		at := pos
		for _, p := range ps {
			r := p(in, at)
			if r.status == pegFail {
				return pegResult{status: pegFail, end: r.end}
			}
			nodes = append(nodes, r.nodes...)
			if r.status == pegMore {
				return pegResult{status: pegMore, end: r.end, nodes: nodes}
			}
			at = r.end
		}
		return pegResult{status: pegOK, end: at, nodes: nodes}
	}
}

// pegChoice takes the first alternative that does not fail. A failure's
// end is the furthest any alternative got, which is where the input
// stopped making sense.
func pegChoice(ps ...peg) peg {
	return func(in string, pos int) pegResult {
		far := pos
		for _, p := range ps {
			r := p(in, pos)
			if r.status != pegFail {
				return r
			}
			far = max(far, r.end)
		}
		return pegResult{status: pegFail, end: far}
	}
}

// pegRep matches p min to max times (max < 0: unbounded). Like llama.cpp it
// does not try p at the end of the input, and stops at an empty match.
func pegRep(p peg, min, max int) peg {
	return func(in string, pos int) pegResult {
		var nodes []*pegNode
		at, n := pos, 0
		for max < 0 || n < max {
			if at >= len(in) {
				break
			}
			r := p(in, at)
			if r.status == pegOK {
				if r.end == at {
					break
				}
				nodes = append(nodes, r.nodes...)
				at = r.end
				n++
				continue
			}
			if r.status == pegMore {
				nodes = append(nodes, r.nodes...)
				return pegResult{status: pegMore, end: r.end, nodes: nodes}
			}
			break
		}
		if n < min {
			if at >= len(in) {
				return pegResult{status: pegMore, end: at, nodes: nodes}
			}
			return pegResult{status: pegFail, end: at}
		}
		return pegResult{status: pegOK, end: at, nodes: nodes}
	}
}

func pegOpt(p peg) peg { return pegRep(p, 0, 1) }

// pegAnd looks ahead without consuming; its tags are dropped.
func pegAnd(p peg) peg {
	return func(in string, pos int) pegResult {
		return pegResult{status: p(in, pos).status, end: pos}
	}
}

func pegNot(p peg) peg {
	return func(in string, pos int) pegResult {
		switch p(in, pos).status {
		case pegOK:
			return pegResult{status: pegFail, end: pos}
		case pegMore:
			return pegResult{status: pegMore, end: pos}
		}
		return pegResult{status: pegOK, end: pos}
	}
}

// pegAtomic drops the tags of a match cut short, so a name or an id shows
// only once it is whole.
func pegAtomic(p peg) peg {
	return func(in string, pos int) pegResult {
		r := p(in, pos)
		if r.status == pegMore {
			r.nodes = nil
		}
		return r
	}
}

func pegTag(tag string, p peg) peg {
	return func(in string, pos int) pegResult {
		r := p(in, pos)
		if r.status == pegFail {
			return r
		}
		n := &pegNode{tag: tag, children: r.nodes}
		if pos < len(in) {
			n.text = in[pos:r.end]
		}
		return pegResult{status: r.status, end: r.end, nodes: []*pegNode{n}}
	}
}

// pegSpace is C's isspace over bytes, any number of them.
func pegSpace(in string, pos int) pegResult {
	for pos < len(in) && isCSpace(in[pos]) {
		pos++
	}
	return pegResult{status: pegOK, end: pos}
}

func isCSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

type runeStatus uint8

const (
	runeOK runeStatus = iota
	runeIncomplete
	runeInvalid
)

// decodeRune is common_parse_utf8_codepoint: a sequence cut by the end of
// the input is incomplete, not invalid.
func decodeRune(in string, pos int) (rune, int, runeStatus) {
	if pos >= len(in) {
		return 0, 0, runeIncomplete
	}
	r, n := utf8.DecodeRuneInString(in[pos:])
	if r == utf8.RuneError && n <= 1 {
		if !utf8.FullRuneInString(in[pos:]) {
			return 0, 0, runeIncomplete
		}
		return 0, 0, runeInvalid
	}
	return r, n, runeOK
}

// pegChars matches min..max (max < 0: unbounded) characters in the class.
func pegChars(in func(rune) bool, min, max int) peg {
	return func(s string, pos int) pegResult {
		at, n := pos, 0
		for max < 0 || n < max {
			r, w, st := decodeRune(s, at)
			if st == runeIncomplete {
				if n >= min {
					return pegResult{status: pegOK, end: at}
				}
				return pegResult{status: pegMore, end: at}
			}
			if st == runeInvalid {
				if n >= min {
					return pegResult{status: pegOK, end: at}
				}
				return pegResult{status: pegFail, end: at}
			}
			if !in(r) {
				break
			}
			at += w
			n++
		}
		if n < min {
			if at >= len(s) {
				return pegResult{status: pegMore, end: at}
			}
			return pegResult{status: pegFail, end: at}
		}
		return pegResult{status: pegOK, end: at}
	}
}

// pegUntil matches up to the first delimiter, or up to a tail of the input
// that begins one (held back until it is known); with no delimiter in sight
// it takes the rest and asks for more.
func pegUntil(delims ...string) peg {
	var first [256]bool // the bytes a delimiter starts with
	for _, d := range delims {
		if d != "" {
			first[d[0]] = true
		}
	}
	return func(in string, pos int) pegResult {
		at := pos
		for at < len(in) {
			if c := in[at]; c < utf8.RuneSelf && !first[c] {
				at++ // fast path: ASCII that starts no delimiter
				continue
			}
			_, w, st := decodeRune(in, at)
			if st == runeIncomplete {
				return pegResult{status: pegMore, end: at}
			}
			if st == runeInvalid {
				return pegResult{status: pegFail, end: at}
			}
			if delimAt(in[at:], delims) {
				return pegResult{status: pegOK, end: at}
			}
			at += w
		}
		return pegResult{status: pegMore, end: at}
	}
}

// delimAt: rest begins with a delimiter, or is the beginning of one.
func delimAt(rest string, delims []string) bool {
	for _, d := range delims {
		if d == "" {
			continue
		}
		if len(rest) >= len(d) {
			if rest[:len(d)] == d {
				return true
			}
		} else if d[:len(rest)] == rest {
			return true
		}
	}
	return false
}

// pegStringBody is the inside of a JSON string up to (not including) the
// closing quote.
func pegStringBody(in string, pos int) pegResult {
	start := pos
	for pos < len(in) {
		c := in[pos]
		if c == '"' {
			return pegResult{status: pegOK, end: pos}
		}
		if c == '\\' {
			save := pos
			pos++
			if pos >= len(in) {
				return pegResult{status: pegMore, end: save}
			}
			switch c := in[pos]; c {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				pos++
			case 'u':
				pos++
				for i := 0; i < 4; i++ {
					if pos >= len(in) {
						return pegResult{status: pegMore, end: save}
					}
					if !isHex(in[pos]) {
						return pegResult{status: pegFail, end: start}
					}
					pos++
				}
			default:
				return pegResult{status: pegFail, end: start}
			}
			continue
		}
		if c < utf8.RuneSelf {
			pos++
			continue
		}
		_, w, st := decodeRune(in, pos)
		if st == runeIncomplete {
			return pegResult{status: pegMore, end: pos}
		}
		if st == runeInvalid {
			return pegResult{status: pegFail, end: pos}
		}
		pos += w
	}
	return pegResult{status: pegMore, end: pos}
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func runeIn(set string) func(rune) bool {
	return func(r rune) bool {
		for _, c := range set {
			if c == r {
				return true
			}
		}
		return false
	}
}

func runeRange(lo, hi rune) func(rune) bool { return func(r rune) bool { return r >= lo && r <= hi } }

// pegJSON is llama.cpp's json() parser: any JSON value, whitespace inside
// allowed, a number committed only once the character after it is seen.
// Nesting deeper than maxJSONDepth fails to parse instead of exhausting the
// stack (llama.cpp's recursion has no bound).
func pegJSON() peg {
	var value peg
	depth := 0
	ref := func(in string, pos int) pegResult {
		if depth >= maxJSONDepth {
			return pegResult{status: pegFail, end: pos}
		}
		depth++
		defer func() { depth-- }()
		return value(in, pos)
	}
	str := pegSeq(pegLit(`"`), pegStringBody, pegLit(`"`))
	digits := pegChars(runeRange('0', '9'), 1, -1)
	number := pegSeq(
		pegOpt(pegLit("-")),
		pegChoice(pegLit("0"), pegSeq(pegChars(runeRange('1', '9'), 1, 1), pegChars(runeRange('0', '9'), 0, -1))),
		pegOpt(pegSeq(pegLit("."), digits)),
		pegOpt(pegSeq(pegChoice(pegLit("e"), pegLit("E")), pegOpt(pegChars(runeIn("+-"), 1, 1)), digits)),
		pegNot(pegChars(runeIn("0123456789.eE+-"), 1, 1)),
	)
	member := pegSeq(str, pegSpace, pegLit(":"), pegSpace, ref)
	object := pegSeq(pegLit("{"), pegSpace, pegChoice(pegLit("}"),
		pegSeq(member, pegRep(pegSeq(pegSpace, pegLit(","), pegSpace, member), 0, -1), pegSpace, pegLit("}"))))
	array := pegSeq(pegLit("["), pegSpace, pegChoice(pegLit("]"),
		pegSeq(ref, pegRep(pegSeq(pegSpace, pegLit(","), pegSpace, ref), 0, -1), pegSpace, pegLit("]"))))
	value = pegChoice(object, array, str, number, pegChoice(pegLit("true"), pegLit("false")), pegLit("null"))
	return ref
}
