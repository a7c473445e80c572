package grammar

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

func mustParse(t testing.TB, src string) *Grammar {
	t.Helper()
	g, err := Parse(src, Options{})
	if err != nil {
		t.Fatalf("parse %q: %v", src, err)
	}
	return g
}

// matches reports whether s is a complete match of g, fed as one string
// (bytes, so UTF-8 sequences cross no token boundary here).
func matches(g *Grammar, s string) bool {
	m := NewMatcher(g, NewVocab(nil, nil))
	return m.AcceptString(s) == nil && m.Done()
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{``, `no "root" rule`},
		{`root ::= foo`, `rule "foo" is used but not defined`},
		{`root ::= "a`, `unterminated string literal`},
		{`root ::= [a-`, `unterminated`},
		{`root ::= ( "a"`, `expected ')'`},
		{`root ::= "a" )`, `expected a newline`},
		{`root := "a"`, `expected ::=`},
		{`root ::= * "a"`, `must follow a symbol`},
		{`root ::= "a"{3,1}`, `maximum is below the minimum`},
		{`root ::= "a"{5000}`, `exceeds the limit`},
		{`root ::= "a"{x}`, `expected an integer`},
		{`root ::= "\q"`, `unknown escape`},
		{`root ::= "\x4"`, `hex digits`},
		{"root ::= \"a\"\nroot ::= \"b\"", `defined twice`},
		{`root ::= root "a"`, `left-recursive`},
		{"root ::= a\na ::= \"x\"? root", `left-recursive`},
		{`root ::= <think>`, `no vocabulary`},
		{`root ::= !"a"`, `expected '<' after '!'`},
		{`root ::= <[12`, `expected ]>`},
		{"root ::= ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((( \"a\"", `nested more than`},
		{`root ::= ("a"{0,40}){0,40}{0,40}`, `too many rules`},
	} {
		_, err := Parse(tc.src, Options{})
		var pe *Error
		if err == nil || !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.src, err, tc.want)
		}
	}
}

func TestErrorPosition(t *testing.T) {
	_, err := Parse("root ::= \"a\"\n  x ::= [b\n", Options{})
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("err = %v, want it on line 3", err)
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		yes, no   []string
	}{
		{"literal", `root ::= "abc"`, []string{"abc"}, []string{"", "ab", "abcd", "abd"}},
		{"alternatives", `root ::= "a" | "bc" | ""`, []string{"a", "bc", ""}, []string{"b", "abc"}},
		{"class", `root ::= [a-cx]+`, []string{"a", "abcx", "xxx"}, []string{"", "d", "ad"}},
		{"negated", `root ::= [^a-c\n]*`, []string{"", "xyz", "dé"}, []string{"a", "x\n"}},
		{"any", `root ::= . .`, []string{"ab", "日本", "\n\t"}, []string{"a", "abc"}},
		{"repeat exact", `root ::= "ab"{2}`, []string{"abab"}, []string{"ab", "ababab"}},
		{"repeat range", `root ::= [0-9]{1,3}`, []string{"1", "12", "123"}, []string{"", "1234"}},
		{"repeat min", `root ::= "x"{2,}`, []string{"xx", "xxxxx"}, []string{"x"}},
		{"optional", `root ::= "a"? "b"`, []string{"b", "ab"}, []string{"aab", "a"}},
		{"group", `root ::= ("ab" | "c")* "."`, []string{".", "ab.", "cabc."}, []string{"a.", "abc"}},
		{"rules", "root ::= word (\" \" word)*\nword ::= [a-z]+", []string{"hi", "hi there you"}, []string{"hi  there", " hi", "hi "}},
		{"escapes", `root ::= "\x41\u00e9\n\"\\" [\]\-]`, []string{"Aé\n\"\\]", "Aé\n\"\\-"}, []string{"Aé\n\"\\a"}},
		{"unicode", `root ::= [ぁ-ゟ]+`, []string{"ひらがな"}, []string{"カ"}},
		{"comments and newlines", "# a comment\nroot ::= ( # inside\n  \"a\" |\n  \"b\" ) # trailing\n\n", []string{"a", "b"}, []string{"ab"}},
		{"right recursion", "root ::= \"(\" root \")\" | \"\"", []string{"", "()", "((()))"}, []string{"(()", "())"}},
		{"json", jsonGBNF, []string{`{"a": [1, 2.5e3, "x\u00e9"], "b": {"c": null}}`, `[]`, `"s"`, `true`}, []string{`{"a" 1}`, `[1,]`, `01`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := mustParse(t, tc.src)
			for _, s := range tc.yes {
				if !matches(g, s) {
					t.Errorf("%q does not match, want a match", s)
				}
			}
			for _, s := range tc.no {
				if matches(g, s) {
					t.Errorf("%q matches, want no match", s)
				}
			}
		})
	}
}

// jsonGBNF is llama.cpp's grammars/json.gbnf.
const jsonGBNF = `
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
`

func TestRoundTrip(t *testing.T) {
	g := mustParse(t, jsonGBNF)
	g2 := mustParse(t, g.String())
	for _, s := range []string{`{"a": [1, "x"]}`, `[1,]`} {
		if matches(g, s) != matches(g2, s) {
			t.Errorf("%q: the printed grammar disagrees with the parsed one:\n%s", s, g)
		}
	}
}

func TestTokens(t *testing.T) {
	pieces := []string{"<think>", "</think>", "a", "b", "<", "EOS"}
	v := NewVocab(pieces, []int32{5})
	g, err := Parse("root ::= <think> body <[1]> \"a\"\nbody ::= !<[1]>*", Options{Token: func(s string) (int32, bool) {
		for i, p := range pieces {
			if p == s {
				return int32(i), true
			}
		}
		return 0, false
	}})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(g, v)
	if a := m.Allowed(); !a.Has(0) || a.Count() != 1 {
		t.Fatalf("at the start only <think> may come, got %d tokens", a.Count())
	}
	for _, tok := range []int32{0, 2, 4, 3} {
		if err := m.Accept(tok); err != nil {
			t.Fatalf("accept %d: %v", tok, err)
		}
	}
	if a := m.Allowed(); a.Has(5) || !a.Has(1) || !a.Has(2) {
		t.Fatalf("inside the body: any token but </think>'s end, got %v", a)
	}
	if err := m.Accept(1); err != nil {
		t.Fatal(err)
	}
	if err := m.Accept(2); err != nil || !m.Done() || !m.Allowed().Has(5) {
		t.Fatalf("after </think> a: done and EOS allowed; err %v done %v", err, m.Done())
	}
	if err := m.Accept(3); !errors.Is(err, ErrRejected) {
		t.Fatalf("a token past the end: err %v, want ErrRejected", err)
	}
}

// smallVocab has single bytes, multi-byte characters split across tokens,
// and longer pieces that share prefixes.
func smallVocab() []string {
	var p []string
	for b := 0x20; b < 0x7f; b++ {
		p = append(p, string(rune(b)))
	}
	p = append(p, "\n", "é", "日", "\xe6", "\x97\xa5", "\xc3", "\xa9", "\xe6\x97", "\xa5x", "\xed", "\xa3", "\x9f", "\xbf", "\xf4", "\x90", "\x8f", "\xf0", "true", "tr", "fal", "false", `"a`, `":`, `", "`,
		"null", "nu", `{"`, `}`, `"}`, "12", "1.5", "e+", " ", "  ", "\n  ", `\u00`, `\n`, "ab", "abc", "abd", "")
	return p
}

func TestMaskMatchesAccept(t *testing.T) {
	pieces := smallVocab()
	eos := int32(len(pieces))
	pieces = append(pieces, "</s>")
	v := NewVocab(pieces, []int32{eos})
	for _, src := range []string{jsonGBNF, `root ::= [^\x00-\x7F]* "x"`, `root ::= ("日" | "é" | "a"{2,3})+`} {
		g := mustParse(t, src)
		rng := rand.New(rand.NewPCG(1, 2))
		for trial := range 8 {
			m := NewMatcher(g, v)
			var prefix []int32
			for step := 0; step < 25; step++ {
				allowed := m.Allowed()
				for id := range int32(len(pieces)) {
					ref := NewMatcher(g, v)
					for _, p := range prefix {
						_ = ref.Accept(p)
					}
					ok := ref.Accept(id) == nil
					if ok && ref.cur.remain > 0 && !ref.partialOK(ref.cur) {
						ok = false
					}
					if ok != allowed.Has(id) {
						t.Fatalf("%s\ntrial %d after %q: token %d (%q): mask says %v, accepting it says %v",
							src, trial, text(v, prefix), id, pieces[id], allowed.Has(id), ok)
					}
				}
				var cands []int32
				for id := range int32(len(pieces)) {
					if allowed.Has(id) && id != eos {
						cands = append(cands, id)
					}
				}
				if len(cands) == 0 {
					break
				}
				tok := cands[rng.IntN(len(cands))]
				if err := m.Accept(tok); err != nil {
					t.Fatalf("accept allowed token %q: %v", pieces[tok], err)
				}
				prefix = append(prefix, tok)
			}
		}
	}
}

func text(v *Vocab, toks []int32) string {
	var b strings.Builder
	for _, t := range toks {
		b.Write(v.Piece(t))
	}
	return b.String()
}

// TestNoDeadEnds: with every byte a token, an allowed token never leads
// to a state that allows nothing (a lead byte whose every completion is
// invalid UTF-8, such as a surrogate, must not be allowed).
func TestNoDeadEnds(t *testing.T) {
	var pieces []string
	for b := range 256 {
		pieces = append(pieces, string([]byte{byte(b)}))
	}
	pieces[0] = "</s>"
	v := NewVocab(pieces, []int32{0})
	rng := rand.New(rand.NewPCG(5, 6))
	for _, src := range []string{jsonGBNF, `root ::= [^"\x00-\x1F]{0,30} "."`, `root ::= [\U00010000-\U0010FFFF]+ "."`, `root ::= . . . "."`} {
		g := mustParse(t, src)
		for range 30 {
			m := NewMatcher(g, v)
			for step := 0; step < 60 && !m.Done(); step++ {
				a := m.Allowed()
				if a.Count() == 0 {
					t.Fatalf("%s: nothing allowed at step %d", src, step)
				}
				var cands []int32
				for id := range int32(256) {
					if a.Has(id) && id != 0 {
						cands = append(cands, id)
					}
				}
				if len(cands) == 0 {
					break
				}
				if err := m.Accept(cands[rng.IntN(len(cands))]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
