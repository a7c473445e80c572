package tokenizer

// deepseek-v3 has no hand-written scanner in llama.cpp: its three regexes run
// one after the other through std::regex (ECMAScript), each refining the
// chunks the previous one left. Regexes that use \p{..} classes run on a
// "collapsed" text with one byte per codepoint: ASCII stays itself, other
// whitespace becomes 0x0B, and other codepoints become a byte naming their
// category. The matchers below reproduce what std::regex finds on that
// collapsed text: ordered alternation with backtracking, \s as the C locale's
// isspace, and a lookahead that sees the end of the chunk as "not \S".

const (
	collOther  = 0xD0 // undefined, control, format, private use
	collNumber = 0xD1
	collLetter = 0xD2
	collPunct  = 0xD3
	collMark   = 0xD4
	collSymbol = 0xD5
)

func collapse(r rune) byte {
	if r >= 0 && r < 0x80 {
		return byte(r)
	}
	f := cptFlags(r)
	switch {
	case f&flagWhitespace != 0:
		return 0x0B
	case f&flagNumber != 0:
		return collNumber
	case f&flagLetter != 0:
		return collLetter
	case f&flagPunctuation != 0:
		return collPunct
	case f&flagMark != 0:
		return collMark
	case f&flagSymbol != 0:
		return collSymbol
	}
	return collOther
}

// Classes of collapsed bytes.
const (
	clsASCIIPunct = 1 << iota // the 32 printable ASCII non-alphanumerics
	clsASCIIAlpha             // [A-Za-z]
	clsLetterMark             // [\p{L}\p{M}]
	clsPunctSym               // [\p{P}\p{S}]
	clsSpace                  // \s in the C locale
	clsNewline                // [\r\n]
	clsLead                   // [^\r\n\p{L}\p{P}\p{S}]
	clsNumber                 // \p{N}
)

var collClass [256]uint8

func init() {
	for b := 0; b < 256; b++ {
		var c uint8
		switch {
		case b >= 'A' && b <= 'Z', b >= 'a' && b <= 'z':
			c |= clsASCIIAlpha | clsLetterMark
		case b >= '0' && b <= '9':
			c |= clsNumber
		case b > ' ' && b < 0x7F:
			c |= clsASCIIPunct | clsPunctSym
		}
		switch b {
		case collLetter, collMark:
			c |= clsLetterMark
		case collPunct, collSymbol:
			c |= clsPunctSym
		case collNumber:
			c |= clsNumber
		case '\t', '\n', '\v', '\f', '\r', ' ':
			c |= clsSpace
		}
		if b == '\r' || b == '\n' {
			c |= clsNewline
		}
		if b != '\r' && b != '\n' && b != collLetter && c&(clsASCIIAlpha|clsPunctSym) == 0 {
			c |= clsLead
		}
		collClass[b] = c
	}
}

// matchFunc returns the length of the match starting at p in t[:end], or 0.
type matchFunc func(t []byte, p, end int) int

// regexSplit refines chunks the way llama.cpp's unicode_regex_split_stl
// does: within each chunk every match becomes a word, and the text between
// matches (a run of any length) becomes one word too.
func regexSplit(t []byte, chunks []int, m matchFunc, out []int) []int {
	start := 0
	for _, n := range chunks {
		lo, end := start, start+n
		gap := lo
		for p := lo; p < end; {
			l := m(t, p, end)
			if l == 0 {
				p++
				continue
			}
			if p > gap {
				out = append(out, p-gap)
			}
			out = append(out, l)
			p += l
			gap = p
		}
		if gap < end {
			out = append(out, end-gap)
		}
		start = end
	}
	return out
}

func runOf(t []byte, p, end int, cls uint8) int {
	q := p
	for q < end && collClass[t[q]]&cls != 0 {
		q++
	}
	return q - p
}

// matchDigits3 is \p{N}{1,3}.
func matchDigits3(t []byte, p, end int) int {
	return min(runOf(t, p, end, clsNumber), 3)
}

// matchCJK is [一-龥぀-ゟ゠-ヿ]+, run by llama.cpp as a wide regex on the
// codepoints themselves; t holds a 1 for each codepoint in the set.
func matchCJK(t []byte, p, end int) int {
	q := p
	for q < end && t[q] == 1 {
		q++
	}
	return q - p
}

// matchDeepseekV3 is
// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ |
// ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
func matchDeepseekV3(t []byte, p, end int) int {
	c := collClass[t[p]]
	next := uint8(0)
	if p+1 < end {
		next = collClass[t[p+1]]
	}
	if c&clsASCIIPunct != 0 && next&clsASCIIAlpha != 0 {
		return 1 + runOf(t, p+1, end, clsASCIIAlpha)
	}
	if c&clsLead != 0 && next&clsLetterMark != 0 {
		return 1 + runOf(t, p+1, end, clsLetterMark)
	}
	if c&clsLetterMark != 0 {
		return runOf(t, p, end, clsLetterMark)
	}
	q := p
	if t[p] == ' ' && next&clsPunctSym != 0 {
		q++
	}
	if n := runOf(t, q, end, clsPunctSym); n > 0 {
		q += n
		return q + runOf(t, q, end, clsNewline) - p
	}
	w := runOf(t, p, end, clsSpace)
	if w == 0 {
		return 0
	}
	for i := w - 1; i >= 0; i-- {
		if collClass[t[p+i]]&clsNewline != 0 {
			return i + 1
		}
	}
	if p+w == end || w == 1 {
		return w
	}
	return w - 1
}

// splitDeepseekV3 runs llama.cpp's deepseek-v3 regex list over c.
func splitDeepseekV3(c []rune, out []int, scratch *[]byte) []int {
	t := (*scratch)[:0]
	for _, r := range c {
		t = append(t, collapse(r))
	}
	chunks := regexSplit(t, []int{len(c)}, matchDigits3, nil)

	cjk := make([]byte, len(c))
	for i, r := range c {
		if (r >= 0x4E00 && r <= 0x9FA5) || (r >= 0x3040 && r <= 0x309F) || (r >= 0x30A0 && r <= 0x30FF) {
			cjk[i] = 1
		}
	}
	chunks = regexSplit(cjk, chunks, matchCJK, nil)
	out = regexSplit(t, chunks, matchDeepseekV3, out)
	*scratch = t
	return out
}
