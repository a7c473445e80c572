package server

import (
	"slices"
	"testing"
)

// TestInfillPrompt checks the layout against llama-server's
// format_prompt_infill, with a tokenizer that makes one token per byte.
func TestInfillPrompt(t *testing.T) {
	tok := func(s string) ([]int32, error) {
		out := make([]int32, len(s))
		for i := range len(s) {
			out[i] = int32(s[i])
		}
		return out, nil
	}
	b := func(s string) []int32 { x, _ := tok(s); return x }
	cat := func(parts ...[]int32) []int32 { return slices.Concat(parts...) }
	const pre, suf, mid, rep, sep = 1000, 1001, 1002, 1003, 1004
	full := FIM{Pre: pre, Suf: suf, Mid: mid, Rep: rep, Sep: sep}
	big := infillLayout{fim: full, bos: []int32{1}, nBatch: 2048, nPredict: -1, nCtx: 8192}
	extra := []extraChunk{{"a.py", "x=1"}, {"tmp", "y"}}

	for _, c := range []struct {
		name   string
		l      infillLayout
		extra  []extraChunk
		prompt []int32
		want   []int32
	}{
		{"plain", big, nil, nil, cat([]int32{rep}, b("myproject\n"), []int32{sep}, b("filename\n"), []int32{1, pre}, b("ab"), []int32{suf}, b("cd"), []int32{mid})},
		{"repository context and a prompt", big, extra, b("P"),
			cat([]int32{rep}, b("myproject\n"), []int32{sep}, b("a.py\n"), b("x=1"), []int32{sep}, b("tmp\n"), b("y"), []int32{sep}, b("filename\n"),
				[]int32{1, pre}, b("ab"), b("P"), []int32{suf}, b("cd"), []int32{mid})},
		{"no separator tokens", infillLayout{fim: FIM{Pre: pre, Suf: suf, Mid: mid, Rep: -1, Sep: -1}, nBatch: 2048, nPredict: -1, nCtx: 8192}, extra[:1], nil,
			cat(b(chunkSeparator), b("x=1"), []int32{pre}, b("ab"), []int32{suf}, b("cd"), []int32{mid})},
		{"spm", infillLayout{fim: FIM{Pre: pre, Suf: suf, Mid: mid, Rep: -1, Sep: -1}, nBatch: 2048, nPredict: -1, nCtx: 8192, spm: true}, nil, nil,
			cat([]int32{suf}, b("cd"), []int32{pre}, b("ab"), []int32{mid})},
		// batch 8: the prefix keeps its last 6 tokens, the suffix its first
		// 8/4-2 = 0; the context leaves 20-8-2*2 = 8 tokens of extra context,
		// taken from its end (of [SEP]filename\n).
		{"cut to the batch and context", infillLayout{fim: full, nBatch: 8, nPredict: 2, nCtx: 20}, extra, nil,
			cat(b("filename\n")[1:], []int32{pre}, b("456789"), []int32{suf, mid})},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix, suffix := "ab", "cd"
			if c.name == "cut to the batch and context" {
				prefix, suffix = "23456789", "cdef"
			}
			got, err := infillPrompt(tok, c.l, prefix, suffix, c.extra, c.prompt)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("got  %v\nwant %v", got, c.want)
			}
		})
	}
}

func TestParseInputExtra(t *testing.T) {
	got, aerr := parseInputExtra([]byte(`[{"text":"a"},{"text":"b","filename":"f.go"}]`))
	if aerr != nil || len(got) != 2 || got[0] != (extraChunk{"tmp", "a"}) || got[1] != (extraChunk{"f.go", "b"}) {
		t.Errorf("%+v %v", got, aerr)
	}
	for _, bad := range []string{`{}`, `[{"filename":"x"}]`, `[{"text":1}]`, `[{"text":"a","filename":null}]`, `["a"]`} {
		if _, aerr := parseInputExtra([]byte(bad)); aerr == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if got, aerr := parseInputExtra([]byte(`null`)); got != nil || aerr != nil {
		t.Errorf("null: %v %v", got, aerr)
	}
}
