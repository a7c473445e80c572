package tokenizer

import (
	"sync"
	"unicode"
)

// Codepoint flags with the meaning llama.cpp gives them (unicode.h): exactly
// one category bit per codepoint below 0x110000, plus a whitespace bit. A
// position outside the current fragment has flags 0, which the splitters test
// for.
const (
	flagUndefined   uint16 = 0x0001
	flagNumber      uint16 = 0x0002 // \p{N}
	flagLetter      uint16 = 0x0004 // \p{L}
	flagSeparator   uint16 = 0x0008 // \p{Z}
	flagMark        uint16 = 0x0010 // \p{M}
	flagPunctuation uint16 = 0x0020 // \p{P}
	flagSymbol      uint16 = 0x0040 // \p{S}
	flagControl     uint16 = 0x0080 // \p{C} less Cn
	flagWhitespace  uint16 = 0x0100 // \s as llama.cpp defines it

	maxCodepoint = 0x110000
	// outOfRange is what a splitter sees past the end of its fragment.
	outOfRange rune = -1
)

var (
	flagsOnce  sync.Once
	flagsTable []uint16
)

// unicode15_1 lists the codepoints whose category differs between Go's
// tables (Unicode 15.0) and llama.cpp's unicode-data.cpp (Unicode 15.1).
// TestFlagsMatchLlamaData checks the whole table against llama.cpp's data.
var unicode15_1 = []struct {
	lo, hi rune
	flag   uint16
}{
	{0x2FFC, 0x2FFF, flagSymbol},   // ideographic description characters
	{0x31EF, 0x31EF, flagSymbol},   // CJK stroke HXG
	{0x2EBF0, 0x2EE5D, flagLetter}, // CJK Unified Ideographs Extension I
}

func buildFlags() {
	t := make([]uint16, maxCodepoint)
	for i := range t {
		t[i] = flagUndefined
	}
	cats := []struct {
		names []string
		flag  uint16
	}{
		{[]string{"Lu", "Ll", "Lt", "Lm", "Lo"}, flagLetter},
		{[]string{"Mn", "Mc", "Me"}, flagMark},
		{[]string{"Nd", "Nl", "No"}, flagNumber},
		{[]string{"Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"}, flagPunctuation},
		{[]string{"Sm", "Sc", "Sk", "So"}, flagSymbol},
		{[]string{"Zs", "Zl", "Zp"}, flagSeparator},
		{[]string{"Cc", "Cf", "Co", "Cs"}, flagControl},
	}
	for _, c := range cats {
		for _, n := range c.names {
			eachRune(unicode.Categories[n], func(r rune) { t[r] = c.flag })
		}
	}
	for _, o := range unicode15_1 {
		for r := o.lo; r <= o.hi; r++ {
			t[r] = o.flag
		}
	}
	eachRune(unicode.White_Space, func(r rune) { t[r] |= flagWhitespace })
	flagsTable = t
}

func eachRune(rt *unicode.RangeTable, f func(rune)) {
	for _, r := range rt.R16 {
		for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
			f(c)
		}
	}
	for _, r := range rt.R32 {
		for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
			f(c)
		}
	}
}

// cptFlags returns llama.cpp's flags for a codepoint; codepoints beyond the
// Unicode range (which its lax UTF-8 decoder can produce) are undefined.
func cptFlags(r rune) uint16 {
	if r < 0 {
		return 0
	}
	if r >= maxCodepoint {
		return flagUndefined
	}
	return flagsTable[r]
}

// isHan reports whether r is in the Han ranges llama.cpp's kimi-k2 splitter
// uses (unicode_cpt_is_han): the CJK unified ideograph blocks A–F and the
// compatibility ideographs, not Unicode's full Han script.
func isHan(r rune) bool {
	switch {
	case r >= 0x4E00 && r <= 0x9FFF,
		r >= 0x3400 && r <= 0x4DBF,
		r >= 0x20000 && r <= 0x2A6DF,
		r >= 0x2A700 && r <= 0x2B73F,
		r >= 0x2B740 && r <= 0x2B81F,
		r >= 0x2B820 && r <= 0x2CEAF,
		r >= 0x2CEB0 && r <= 0x2EBEF,
		r >= 0xF900 && r <= 0xFAFF,
		r >= 0x2F800 && r <= 0x2FA1F:
		return true
	}
	return false
}

// asciiLower folds the letters the contraction rules compare against. The
// contraction suffixes are ASCII, and no non-ASCII codepoint lowercases to an
// ASCII letter among s, t, m, d, r, e, v, l (TestFlagsMatchLlamaData checks
// that against llama.cpp's lowercase map), so ASCII folding is exact here.
func asciiLower(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// decodeCpt decodes one codepoint at s[i] the way llama.cpp's
// unicode_cpt_from_utf8 does: it checks only the lead byte's length class and
// that the continuation bytes exist and look like continuation bytes, so
// overlong forms, surrogates and values above U+10FFFF pass through; anything
// else consumes one byte and yields U+FFFD.
func decodeCpt(s string, i int) (rune, int) {
	b0 := s[i]
	switch {
	case b0 < 0x80:
		return rune(b0), 1
	case b0&0x40 == 0:
		return 0xFFFD, 1
	case b0&0x20 == 0:
		if i+1 < len(s) && s[i+1]&0xC0 == 0x80 {
			return rune(b0&0x1F)<<6 | rune(s[i+1]&0x3F), 2
		}
	case b0&0x10 == 0:
		if i+2 < len(s) && s[i+1]&0xC0 == 0x80 && s[i+2]&0xC0 == 0x80 {
			return rune(b0&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F), 3
		}
	case b0&0x08 == 0:
		if i+3 < len(s) && s[i+1]&0xC0 == 0x80 && s[i+2]&0xC0 == 0x80 && s[i+3]&0xC0 == 0x80 {
			return rune(b0&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F), 4
		}
	}
	return 0xFFFD, 1
}

// decodeCpts appends the codepoints of s to dst (see decodeCpt).
func decodeCpts(dst []rune, s string) []rune {
	for i := 0; i < len(s); {
		if s[i] < 0x80 {
			dst = append(dst, rune(s[i]))
			i++
			continue
		}
		r, n := decodeCpt(s, i)
		dst = append(dst, r)
		i += n
	}
	return dst
}

// appendCpt encodes r like unicode_cpt_to_utf8, including surrogates. Values
// above U+10FFFF (llama.cpp throws on them) are written with the 4-byte
// pattern, which gives back the bytes they were decoded from.
func appendCpt(dst []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(dst, byte(r))
	case r < 0x800:
		return append(dst, 0xC0|byte(r>>6), 0x80|byte(r)&0x3F)
	case r < 0x10000:
		return append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	default:
		return append(dst, 0xF0|byte(r>>18)&0x07, 0x80|byte(r>>12)&0x3F, 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	}
}

// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves,
// the other 68 bytes map to U+0100 onwards in byte order.
var (
	byteToRune [256]rune
	byteToText [256]string
	// runeToByte inverts byteToRune; -1 marks runes outside the alphabet.
	runeToByte [0x144]int16
)

func init() {
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		runeToByte[byteToRune[b]] = int16(b)
		byteToText[b] = string(byteToRune[b])
	}
}

// alphabetByte returns the byte a rune of the alphabet stands for.
func alphabetByte(r rune) (byte, bool) {
	if r >= 0 && int(r) < len(runeToByte) && runeToByte[r] >= 0 {
		return byte(runeToByte[r]), true
	}
	return 0, false
}

// byteEncode returns the GPT-2 byte-level spelling of raw bytes.
func byteEncode(raw string) string {
	return string(appendByteEncoded(make([]byte, 0, len(raw)*2), raw))
}

func appendByteEncoded(dst []byte, raw string) []byte {
	for i := 0; i < len(raw); i++ {
		dst = append(dst, byteToText[raw[i]]...)
	}
	return dst
}

// isByteLevel reports whether text is the canonical byte-level spelling of
// some bytes, i.e. whether byte-level BPE can ever produce it.
func isByteLevel(text string) bool {
	for i := 0; i < len(text); {
		c := text[i]
		if c < 0x80 {
			if _, ok := alphabetByte(rune(c)); !ok {
				return false
			}
			i++
			continue
		}
		if c < 0xC2 || c > 0xC5 || i+1 >= len(text) || text[i+1]&0xC0 != 0x80 {
			return false
		}
		if _, ok := alphabetByte(rune(c&0x1F)<<6 | rune(text[i+1]&0x3F)); !ok {
			return false
		}
		i += 2
	}
	return true
}

// byteDecode inverts byteEncode; ok is false when text is not a canonical
// byte-level spelling.
func byteDecode(text string) (raw string, ok bool) {
	if !isByteLevel(text) {
		return "", false
	}
	out := make([]byte, 0, len(text))
	for i := 0; i < len(text); {
		r, n := decodeCpt(text, i)
		b, _ := alphabetByte(r)
		out = append(out, b)
		i += n
	}
	return string(out), true
}
