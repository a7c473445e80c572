package tokenizer

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// llamaSrc finds a llama.cpp source checkout: $K3_LLAMA_SRC, the one
// tools/parity/setup.sh checks out, or /work/llama.cpp-src.
func llamaSrc(t *testing.T, rel string) string {
	t.Helper()
	cands := []string{filepath.Join("..", "..", "tools", "parity", "llama.cpp-src"), "/work/llama.cpp-src"}
	if d := os.Getenv("K3_LLAMA_SRC"); d != "" {
		cands = append([]string{d}, cands...)
	}
	for _, d := range cands {
		p := filepath.Join(d, rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("llama.cpp source with %s not found (set K3_LLAMA_SRC)", rel)
	return ""
}

// TestFlagsMatchLlamaData checks k3's codepoint flags, built from Go's
// Unicode tables plus a short Unicode 15.1 list, against every codepoint of
// llama.cpp's generated unicode-data.cpp.
func TestFlagsMatchLlamaData(t *testing.T) {
	path := llamaSrc(t, "src/unicode-data.cpp")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flagsOnce.Do(buildFlags)

	pair := regexp.MustCompile(`^\{0x([0-9A-F]+), 0x([0-9A-F]+)\},$`)
	single := regexp.MustCompile(`^0x([0-9A-F]+),$`)
	decl := regexp.MustCompile(`^const .* (\w+) = \{`)
	var starts, flags []uint64
	var white []rune
	lower := map[rune]rune{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := decl.FindStringSubmatch(line); m != nil {
			section = m[1]
			continue
		}
		if m := pair.FindStringSubmatch(line); m != nil {
			a, _ := strconv.ParseUint(m[1], 16, 32)
			b, _ := strconv.ParseUint(m[2], 16, 32)
			switch section {
			case "unicode_ranges_flags":
				starts, flags = append(starts, a), append(flags, b)
			case "unicode_map_lowercase":
				lower[rune(a)] = rune(b)
			}
		} else if m := single.FindStringSubmatch(line); m != nil && section == "unicode_set_whitespace" {
			a, _ := strconv.ParseUint(m[1], 16, 32)
			white = append(white, rune(a))
		}
	}
	if len(starts) < 1000 || len(white) == 0 || len(lower) < 1000 {
		t.Fatalf("parsed too little from %s: %d ranges, %d whitespace, %d lowercase", path, len(starts), len(white), len(lower))
	}
	want := make([]uint16, maxCodepoint)
	for i := 1; i < len(starts); i++ {
		for c := starts[i-1]; c < starts[i]; c++ {
			want[c] = uint16(flags[i-1])
		}
	}
	for _, r := range white {
		want[r] |= flagWhitespace
	}
	bad := 0
	for r := rune(0); r < maxCodepoint; r++ {
		if got := cptFlags(r); got != want[r] {
			if bad++; bad <= 10 {
				t.Errorf("U+%04X: flags %#x, llama.cpp %#x", r, got, want[r])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d codepoints differ", bad)
	}
	// asciiLower is exact only if nothing else lowercases to these letters.
	for from, to := range lower {
		if strings.ContainsRune("stmdrevl", to) && !(from >= 'A' && from <= 'Z') {
			t.Errorf("U+%04X lowercases to %q; asciiLower would miss it", from, to)
		}
	}
}

func TestDecodeCpts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []rune
	}{
		{"ascii", "ab", []rune{'a', 'b'}},
		{"valid", "é中😀", []rune{0xE9, 0x4E2D, 0x1F600}},
		{"stray continuation", "a\x80b", []rune{'a', 0xFFFD, 'b'}},
		{"truncated 3-byte", "\xE4\xB8", []rune{0xFFFD, 0xFFFD}},
		{"overlong NUL", "\xC0\x80", []rune{0}},
		{"surrogate", "\xED\xA0\x80", []rune{0xD800}},
		{"5-byte lead", "\xF8\x88\x80\x80\x80", []rune{0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD}},
		{"bad second byte", "\xE4(", []rune{0xFFFD, '('}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, decodeCpts(nil, tt.in)); diff != "" {
				t.Errorf("decodeCpts(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestByteLevelAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for b := 0; b < 256; b++ {
		r := byteToRune[b]
		if seen[r] {
			t.Fatalf("byte %#x maps to %U twice", b, r)
		}
		seen[r] = true
	}
	if byteToRune[' '] != 'Ġ' || byteToRune['\n'] != 'Ċ' || byteToRune['a'] != 'a' {
		t.Errorf("space, newline, a map to %U %U %U", byteToRune[' '], byteToRune['\n'], byteToRune['a'])
	}
	for _, s := range []string{"", "hello world\n", "\x00\xff\x80 é"} {
		raw, ok := byteDecode(byteEncode(s))
		if !ok || raw != s {
			t.Errorf("byteDecode(byteEncode(%q)) = %q, %v", s, raw, ok)
		}
		if !utf8.ValidString(byteEncode(s)) {
			t.Errorf("byteEncode(%q) is not UTF-8", s)
		}
	}
	if _, ok := byteDecode("\xC1\xA1"); ok {
		t.Error("an overlong spelling decoded as a byte-level token")
	}
	if _, ok := byteDecode("中"); ok {
		t.Error("a character outside the alphabet decoded")
	}
}
