package tokenizer

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// buildPieces renders every token once, as llama.cpp's token-to-piece cache
// does (with special = true).
func (t *Tokenizer) buildPieces() {
	t.pieces = make([]string, len(t.tokens))
	for id, w := range t.tokens {
		a := t.attrs[id]
		switch {
		case a&(AttrUnknown|AttrControl|AttrUserDefined) != 0:
			t.pieces[id] = w
		case a&AttrNormal != 0:
			t.pieces[id] = decodeTokenText(w)
		case a&AttrByte != 0:
			t.pieces[id] = string([]byte{byteTokenValue(w)})
		default:
			// UNUSED and UNDEFINED tokens render as nothing.
		}
	}
}

// decodeTokenText maps a byte-level token text back to bytes; a character
// outside the byte alphabet is spelled out the way llama_decode_text does.
func decodeTokenText(w string) string {
	out := make([]byte, 0, len(w))
	for i := 0; i < len(w); {
		r, n := decodeCpt(w, i)
		i += n
		if b, ok := alphabetByte(r); ok {
			out = append(out, b)
			continue
		}
		out = append(out, "[UNK_BYTE_0x"...)
		for _, c := range appendCpt(nil, r) {
			out = append(out, fmt.Sprintf("%02x", c)...)
		}
		out = append(out, w...)
		out = append(out, ']')
	}
	return string(out)
}

// byteTokenValue reads "<0xXX>" the way llama.cpp does (strtol on the two
// characters after "<0x").
func byteTokenValue(w string) byte {
	if len(w) < 3 {
		return 0
	}
	h := w[3:min(len(w), 5)]
	for i := 0; i < len(h); i++ {
		c := h[i] | 0x20
		if !(h[i] >= '0' && h[i] <= '9') && !(c >= 'a' && c <= 'f') {
			h = h[:i]
			break
		}
	}
	v, _ := strconv.ParseUint(h, 16, 8)
	return byte(v)
}

// Piece returns the text of one token as llama_token_to_piece does (with
// lstrip 0): CONTROL and UNKNOWN tokens render only when special is set.
func (t *Tokenizer) Piece(id int32, special bool) (string, error) {
	if id < 0 || int(id) >= len(t.tokens) {
		return "", fmt.Errorf("tokenizer: token id %d out of range [0, %d)", id, len(t.tokens))
	}
	if !special && t.attrs[id]&(AttrUnknown|AttrControl) != 0 {
		return "", nil
	}
	return t.pieces[id], nil
}

// Detokenize renders tokens as llama_detokenize does: removeSpecial drops a
// leading BOS and trailing EOS that the vocabulary adds itself;
// unparseSpecial renders CONTROL tokens as their text instead of nothing.
func (t *Tokenizer) Detokenize(ids []int32, removeSpecial, unparseSpecial bool) (string, error) {
	removeSpace := t.addSpacePrefix
	if removeSpecial && t.addBOS && len(ids) > 0 && ids[0] == t.special.bos {
		removeSpace = false
		ids = ids[1:]
	}
	if removeSpecial && t.addEOS && len(ids) > 0 && ids[len(ids)-1] == t.special.eos {
		ids = ids[:len(ids)-1]
	}
	var out []byte
	for _, id := range ids {
		p, err := t.Piece(id, unparseSpecial)
		if err != nil {
			return "", err
		}
		if removeSpace && len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
		removeSpace = false
		out = append(out, p...)
	}
	if t.pre.cleanSpaces {
		out = cleanSpaces(out)
	}
	return string(out), nil
}

// cleanSpaces is llama.cpp's clean_up_tokenization_spaces, three passes:
// drop a space before ?!., ; collapse " ' " to "'" ; drop the space before
// 's 'm 're 've.
func cleanSpaces(in []byte) []byte {
	if len(in) == 0 {
		return in
	}
	out := make([]byte, 0, len(in))
	out = append(out, in[0])
	for i := 1; i < len(in); i++ {
		x := in[i]
		if in[i-1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') {
			out = out[:len(out)-1]
		}
		out = append(out, x)
	}
	in, out = out, make([]byte, 0, len(out))
	out = append(out, in[0])
	skipped := -1 // index whose space pass two removed (llama.cpp writes a NUL there)
	for i := 1; i < len(in); i++ {
		x := in[i]
		if x == '\'' && i+1 < len(in) && in[i-1] == ' ' && i-1 != skipped && in[i+1] == ' ' {
			out = out[:len(out)-1]
			i++
			skipped = i
		}
		out = append(out, x)
	}
	in, out = out, make([]byte, 0, len(out))
	out = append(out, in[0])
	for i := 1; i < len(in); i++ {
		x := in[i]
		if in[i-1] == ' ' && x == '\'' && i+1 < len(in) {
			x1 := in[i+1]
			switch {
			case x1 == 's' || x1 == 'm':
				out = out[:len(out)-1]
			case i+2 < len(in) && (x1 == 'r' || x1 == 'v') && in[i+2] == 'e':
				out = out[:len(out)-1]
			}
		}
		out = append(out, x)
	}
	return out
}

// Decoder turns a stream of tokens into text chunks that never split a
// UTF-8 character: an incomplete sequence at the end is held back until the
// next token completes it, while bytes that can never become valid are
// passed on as they are, so the chunks concatenate to exactly what
// Detokenize returns for the whole sequence (without its trailing-EOS
// removal, which a stream cannot know about).
type Decoder struct {
	t              *Tokenizer
	unparseSpecial bool
	removeSpecial  bool
	first          bool
	removeSpace    bool
	buf            []byte // rendered bytes not yet emitted
}

// NewDecoder starts a stream; the flags mean what they mean for Detokenize.
func (t *Tokenizer) NewDecoder(removeSpecial, unparseSpecial bool) *Decoder {
	return &Decoder{t: t, removeSpecial: removeSpecial, unparseSpecial: unparseSpecial, first: true, removeSpace: t.addSpacePrefix}
}

// Add renders one token and returns the text that is now final.
func (d *Decoder) Add(id int32) (string, error) {
	first := d.first
	d.first = false
	if first && d.removeSpecial && d.t.addBOS && id == d.t.special.bos {
		d.removeSpace = false
		return "", nil
	}
	p, err := d.t.Piece(id, d.unparseSpecial)
	if err != nil {
		return "", err
	}
	if d.removeSpace && len(p) > 0 && p[0] == ' ' {
		p = p[1:]
	}
	d.removeSpace = false
	d.buf = append(d.buf, p...)
	return d.take(d.safeCut()), nil
}

// Flush returns whatever is held back; call it at the end of the stream.
func (d *Decoder) Flush() string { return d.take(len(d.buf)) }

func (d *Decoder) take(k int) string {
	if k == 0 {
		return ""
	}
	chunk := d.buf[:k]
	if d.t.pre.cleanSpaces {
		chunk = cleanSpaces(chunk)
	}
	s := string(chunk)
	d.buf = append(d.buf[:0], d.buf[k:]...)
	return s
}

// safeCut is the longest prefix of buf that later bytes cannot change: it
// stops before a trailing incomplete UTF-8 sequence and, when spaces are
// cleaned, before the last three bytes if any of them is a space or an
// apostrophe (every clean-up pattern spans at most that far).
func (d *Decoder) safeCut() int {
	k := len(d.buf)
	for i := max(0, k-3); i < k; i++ {
		if d.buf[i] >= 0xC0 && !utf8.FullRune(d.buf[i:]) {
			k = i
			break
		}
	}
	if !d.t.pre.cleanSpaces {
		return k
	}
	for ; k > 0; k-- {
		clean := true
		for _, c := range d.buf[max(0, k-3):k] {
			if c == ' ' || c == '\'' {
				clean = false
				break
			}
		}
		if clean {
			return k
		}
	}
	return 0
}
