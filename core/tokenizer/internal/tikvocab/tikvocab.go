// Package tikvocab turns a tiktoken rank table into the GGUF tokenizer
// metadata llama.cpp's converter writes for Kimi (conversion/kimi_linear.py):
// byte-level token strings in rank order, merges derived from the ranks, and
// special tokens above the ranked ones. k3's tokenizer tests use it to get a
// real 200k-token vocabulary from the rank files the js-tiktoken npm package
// ships, without keeping the vocabulary in git.
package tikvocab

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Ranks is a tiktoken vocabulary: Ranks[i] holds the bytes of rank i (nil
// where the table has a gap).
type Ranks [][]byte

// FindJSTiktoken returns the path of a js-tiktoken rank file ("o200k_base",
// "cl100k_base", ...) under one of the given node_modules directories.
func FindJSTiktoken(name string, nodeModules ...string) (string, error) {
	var tried []string
	for _, nm := range nodeModules {
		p := filepath.Join(nm, "js-tiktoken", "dist", "ranks", name+".cjs")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	return "", fmt.Errorf("tikvocab: %s rank file not found (tried %s)", name, strings.Join(tried, ", "))
}

// LoadJSTiktoken reads a js-tiktoken rank module: a JS object literal whose
// bpe_ranks field holds lines of "<tag> <first rank> <base64 token>...".
func LoadJSTiktoken(path string) (Ranks, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tikvocab: %w", err)
	}
	lo, hi := strings.IndexByte(string(b), '{'), strings.LastIndexByte(string(b), '}')
	if lo < 0 || hi < lo {
		return nil, fmt.Errorf("tikvocab: %s: no object literal", path)
	}
	var mod struct {
		BPERanks string `json:"bpe_ranks"`
	}
	if err := json.Unmarshal(b[lo:hi+1], &mod); err != nil {
		return nil, fmt.Errorf("tikvocab: %s: %w", path, err)
	}
	var ranks Ranks
	for ln, line := range strings.Split(mod.BPERanks, "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, " ")
		if len(f) < 2 {
			return nil, fmt.Errorf("tikvocab: %s: line %d: too few fields", path, ln+1)
		}
		first, err := strconv.Atoi(f[1])
		if err != nil || first < 0 {
			return nil, fmt.Errorf("tikvocab: %s: line %d: bad rank %q", path, ln+1, f[1])
		}
		for i, tok := range f[2:] {
			raw, err := base64.StdEncoding.DecodeString(tok)
			if err != nil {
				return nil, fmt.Errorf("tikvocab: %s: line %d: token %d: %w", path, ln+1, i, err)
			}
			r := first + i
			for len(ranks) <= r {
				ranks = append(ranks, nil)
			}
			ranks[r] = raw
		}
	}
	if len(ranks) == 0 {
		return nil, fmt.Errorf("tikvocab: %s: no ranks", path)
	}
	return ranks, nil
}

// Token types as tokenizer.ggml.token_type stores them.
const (
	TypeNormal int32 = 1
	TypeUnused int32 = 5
)

// Special is a token added above the ranked ones.
type Special struct {
	Text string
	Type int32
}

// Vocab is the generated tokenizer.ggml.tokens, token_type and merges.
type Vocab struct {
	Tokens []string
	Types  []int32
	Merges []string
}

// Vocab builds the vocabulary: ranked tokens, then specials, then "[PAD<i>]"
// UNUSED tokens up to size (as the converter pads ids the tokenizer leaves
// unassigned). Merges come from replaying tiktoken's BPE on each multi-byte
// token limited to lower ranks: a token whose replay ends in exactly two
// parts gets the merge "left right", in rank order.
func (r Ranks) Vocab(specials []Special, size int) Vocab {
	rank := make(map[string]int, len(r))
	for i, b := range r {
		if b != nil {
			rank[string(b)] = i
		}
	}
	n := max(len(r)+len(specials), size)
	c := Vocab{Tokens: make([]string, n), Types: make([]int32, n)}
	for i, b := range r {
		if b == nil {
			c.Tokens[i], c.Types[i] = "[PAD"+strconv.Itoa(i)+"]", TypeUnused
			continue
		}
		c.Tokens[i], c.Types[i] = encode(b), TypeNormal
		if len(b) < 2 {
			continue
		}
		if parts := replay(rank, b, i); len(parts) == 2 {
			c.Merges = append(c.Merges, encode(parts[0])+" "+encode(parts[1]))
		}
	}
	for j, s := range specials {
		c.Tokens[len(r)+j], c.Types[len(r)+j] = s.Text, s.Type
	}
	for i := len(r) + len(specials); i < n; i++ {
		c.Tokens[i], c.Types[i] = "[PAD"+strconv.Itoa(i)+"]", TypeUnused
	}
	return c
}

// replay is tiktoken's merge loop on b, stopping before rank maxRank.
func replay(rank map[string]int, b []byte, maxRank int) [][]byte {
	parts := make([][]byte, len(b))
	for i := range b {
		parts[i] = b[i : i+1]
	}
	var key []byte
	for len(parts) > 1 {
		best, bestRank := -1, maxRank
		for i := 0; i+1 < len(parts); i++ {
			key = append(append(key[:0], parts[i]...), parts[i+1]...)
			if rk, ok := rank[string(key)]; ok && rk < bestRank {
				best, bestRank = i, rk
			}
		}
		if best < 0 {
			break
		}
		// parts are adjacent slices of b, so the left one can grow over the right.
		parts[best] = parts[best][:len(parts[best])+len(parts[best+1])]
		parts = append(parts[:best+1], parts[best+2:]...)
	}
	return parts
}

// encode spells bytes in GPT-2's byte-level alphabet.
func encode(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteRune(byteRune[c])
	}
	return sb.String()
}

var byteRune [256]rune

func init() {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteRune[b] = rune(b)
		} else {
			byteRune[b] = 256 + n
			n++
		}
	}
}
