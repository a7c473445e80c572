package server

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// FIM are a vocabulary's fill-in-the-middle tokens, -1 where it has none:
// prefix, suffix and middle mark the hole; repo and file separate the
// repository context of /infill's input_extra.
type FIM struct {
	Pre, Suf, Mid int32
	Rep, Sep      int32
}

// extraChunk is one file of /infill's input_extra.
type extraChunk struct {
	Filename string
	Text     string
}

// parseInputExtra validates input_extra as llama-server does: an array of
// {"text": string, "filename": string (optional)}; missing or null is none.
func parseInputExtra(raw json.RawMessage) ([]extraChunk, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errInvalid(`"input_extra" must be an array of {"filename": string, "text": string}`)
	}
	out := make([]extraChunk, 0, len(items))
	for _, it := range items {
		c := extraChunk{Filename: "tmp"}
		t, ok := it["text"]
		if !ok || bytes.Equal(bytes.TrimSpace(t), []byte("null")) || json.Unmarshal(t, &c.Text) != nil {
			return nil, errInvalid(`extra_context chunk must contain a "text" field with a string value`)
		}
		if f, ok := it["filename"]; ok {
			if bytes.Equal(bytes.TrimSpace(f), []byte("null")) || json.Unmarshal(f, &c.Filename) != nil {
				return nil, errInvalid(`extra_context chunk's "filename" field must be a string`)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// infillLayout is what shapes an /infill prompt besides the texts.
type infillLayout struct {
	fim      FIM
	bos      []int32 // the BOS the model adds, if any
	nBatch   int     // llama-server's -b: the prefix and suffix share it 3:1
	nPredict int     // the server's -n (-1: none), kept free for generation
	nCtx     int
	spm      bool // --spm-infill: suffix before prefix
}

// chunkSeparator is what llama-server puts between extra chunks when the
// vocabulary has no file separator token.
const chunkSeparator = "\n\n--- snippet ---\n\n"

// infillPrompt lays out an /infill prompt as llama-server's
// format_prompt_infill does (the repository-level FIM pattern):
//
//	[extra context] [BOS] PRE prefix prompt SUF suffix MID
//
// where the extra context is [REP]myproject\n then [SEP]filename\n text per
// chunk (or the snippet separator without SEP) then [SEP]filename\n, cut from
// the front to what the context leaves beside a batch and twice -n; the
// prefix keeps its last 3/4 of a batch, the suffix its first quarter less
// the prompt. With spm the suffix part comes first.
func infillPrompt(tok func(string) ([]int32, error), l infillLayout, prefix, suffix string, extra []extraChunk, prompt []int32) ([]int32, error) {
	var err error
	tk := func(s string) []int32 {
		if err != nil {
			return nil
		}
		var t []int32
		t, err = tok(s)
		return t
	}
	var ext []int32
	if l.fim.Rep >= 0 {
		ext = append(append(ext, l.fim.Rep), tk("myproject\n")...)
	}
	for _, c := range extra {
		if l.fim.Sep >= 0 {
			ext = append(append(ext, l.fim.Sep), tk(c.Filename+"\n")...)
		} else {
			ext = append(ext, tk(chunkSeparator)...)
		}
		ext = append(ext, tk(c.Text)...)
	}
	if l.fim.Sep >= 0 {
		ext = append(append(ext, l.fim.Sep), tk("filename\n")...)
	}
	pre, suf := tk(prefix), tk(suffix)
	if err != nil {
		return nil, err
	}
	nPre := min(len(pre), 3*(l.nBatch/4))
	nSuf := min(len(suf), max(0, l.nBatch/4-(2+len(prompt))))
	nExtra := min(max(0, l.nCtx-l.nBatch-2*l.nPredict), len(ext))
	pre, suf = pre[len(pre)-nPre:], suf[:nSuf]

	head := append(append([]int32{l.fim.Pre}, pre...), prompt...)
	tail := append([]int32{l.fim.Suf}, suf...)
	if l.spm {
		head, tail = tail, head
	}
	out := make([]int32, 0, nExtra+len(l.bos)+len(head)+len(tail)+1)
	out = append(out, ext[len(ext)-nExtra:]...)
	out = append(out, l.bos...)
	out = append(append(out, head...), tail...)
	return append(out, l.fim.Mid), nil
}

func (f FIM) missing() string {
	var m string
	for _, x := range []struct {
		tok  int32
		what string
	}{{f.Pre, "prefix"}, {f.Suf, "suffix"}, {f.Mid, "middle"}} {
		if x.tok < 0 {
			m += fmt.Sprintf("%s token is missing. ", x.what)
		}
	}
	return m
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
