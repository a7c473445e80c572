package parity

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
)

// LoadInfo is what libllama reports after loading a model.
type LoadInfo struct {
	Arch      string `json:"arch"`
	Desc      string `json:"desc"`
	NVocab    int    `json:"n_vocab"`
	NLayer    int    `json:"n_layer"`
	NEmbd     int    `json:"n_embd"`
	NHead     int    `json:"n_head"`
	NHeadKV   int    `json:"n_head_kv"`
	NCtxTrain int    `json:"n_ctx_train"`
	NParams   uint64 `json:"n_params"`
	Size      uint64 `json:"size"`       // bytes of weights
	VocabType int    `json:"vocab_type"` // enum llama_vocab_type
	BOS       int32  `json:"bos"`
	EOS       int32  `json:"eos"`
}

// Load loads a model (the first shard of a split one) with
// llama_model_load_from_file. A file llama.cpp refuses gives a *LoadError
// carrying llama.cpp's reason.
func (r *Ref) Load(model string) (*LoadInfo, error) {
	var li LoadInfo
	if err := r.runJSON(&li, nil, "load", model); err != nil {
		return nil, asLoadError(err, model)
	}
	return &li, nil
}

// LogitsOptions sets up the llama.cpp context for Logits and GreedyOpts.
type LogitsOptions struct {
	Threads   int    // 0: 1 thread
	All       bool   // logits of every position, not just the last (Logits only)
	Batch     int    // n_ubatch; 0: llama.cpp's default (512)
	Ctx       int    // n_ctx; 0: what the tokens need
	FlashAttn string // "auto", "on" or "off"; "": llama.cpp's default (auto)
	CPU       string // CPU variant (Generic, Native, a name); "": Native
	IgnoreEOG bool   // GreedyOpts: keep generating past an end-of-generation token
	// NoRepack keeps weights in their file layout (llama.cpp's --no-repack).
	// By default the x86 CPU backend repacks Q4_0, Q4_K and IQ4_NL (AVX2)
	// and Q2_K (AVX-512) into interleaved layouts with their own matmul
	// kernels (ggml-cpu/repack.cpp), whose sums round differently.
	NoRepack bool
}

func (o LogitsOptions) args() []string {
	var a []string
	if o.Threads > 0 {
		a = append(a, "--threads", strconv.Itoa(o.Threads))
	}
	if o.All {
		a = append(a, "--all")
	}
	if o.Batch > 0 {
		a = append(a, "--batch", strconv.Itoa(o.Batch))
	}
	if o.Ctx > 0 {
		a = append(a, "--ctx", strconv.Itoa(o.Ctx))
	}
	if o.FlashAttn != "" {
		a = append(a, "--flash-attn", o.FlashAttn)
	}
	if o.CPU != "" {
		a = append(a, "--cpu", o.CPU)
	}
	if o.IgnoreEOG {
		a = append(a, "--ignore-eog")
	}
	if o.NoRepack {
		a = append(a, "--no-repack")
	}
	return a
}

// Logits evaluates tokens as one prompt (one llama_decode, split into
// ubatches of o.Batch) and returns the logits of the last position, or of
// every position with o.All: one row of n_vocab floats per position.
func (r *Ref) Logits(model string, tokens []int32, o LogitsOptions) ([][]float32, error) {
	o.IgnoreEOG = false
	out, err := r.run(tokenReader(tokens), append([]string{"logits", model}, o.args()...)...)
	if err != nil {
		return nil, asLoadError(err, model)
	}
	if len(out) < 8 {
		return nil, fmt.Errorf("parity: logits %s: short output (%d bytes)", model, len(out))
	}
	rows := int(binary.LittleEndian.Uint32(out))
	nv := int(binary.LittleEndian.Uint32(out[4:]))
	flat, err := floats(out[8:], rows*nv)
	if err != nil {
		return nil, fmt.Errorf("parity: logits %s: %d rows of %d: %w", model, rows, nv, err)
	}
	res := make([][]float32, rows)
	for i := range res {
		res[i] = flat[i*nv : (i+1)*nv : (i+1)*nv]
	}
	return res, nil
}

// Greedy evaluates the prompt and then generates up to n tokens with
// llama.cpp's greedy sampler. It stops after an end-of-generation token,
// which is included in the result.
func (r *Ref) Greedy(model string, tokens []int32, n int, threads int) ([]int32, error) {
	return r.GreedyOpts(model, tokens, n, LogitsOptions{Threads: threads})
}

// GreedyOpts is Greedy with the context options of Logits (o.All is ignored).
func (r *Ref) GreedyOpts(model string, tokens []int32, n int, o LogitsOptions) ([]int32, error) {
	o.All = false
	var res struct {
		Tokens []int32 `json:"tokens"`
	}
	args := append([]string{"greedy", model, strconv.Itoa(n)}, o.args()...)
	if err := r.runJSON(&res, tokenReader(tokens), args...); err != nil {
		return nil, asLoadError(err, model)
	}
	return res.Tokens, nil
}

// Tokenize runs llama_tokenize on text. addSpecial adds BOS/EOS as the
// model's metadata asks; parseSpecial turns special-token text into tokens.
func (r *Ref) Tokenize(model string, text []byte, addSpecial, parseSpecial bool) ([]int32, error) {
	args := []string{"tokenize", model}
	if addSpecial {
		args = append(args, "--add-special")
	}
	if parseSpecial {
		args = append(args, "--parse-special")
	}
	var res struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := r.runJSON(&res, bytes.NewReader(text), args...); err != nil {
		return nil, asLoadError(err, model)
	}
	if res.Tokens == nil {
		res.Tokens = []int32{}
	}
	return res.Tokens, nil
}

// TokenizeAll tokenizes many texts with one vocabulary load, as Tokenize
// would each; much faster for large vocabularies.
func (r *Ref) TokenizeAll(model string, texts [][]byte, addSpecial, parseSpecial bool) ([][]int32, error) {
	args := []string{"tokenize", model, "--many"}
	if addSpecial {
		args = append(args, "--add-special")
	}
	if parseSpecial {
		args = append(args, "--parse-special")
	}
	var in bytes.Buffer
	for _, t := range texts {
		if uint64(len(t)) > math.MaxUint32 {
			return nil, fmt.Errorf("parity: tokenize: text of %d bytes is too long", len(t))
		}
		in.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(t))))
		in.Write(t)
	}
	var res struct {
		Texts [][]int32 `json:"texts"`
	}
	if err := r.runJSON(&res, &in, args...); err != nil {
		return nil, asLoadError(err, model)
	}
	if len(res.Texts) != len(texts) {
		return nil, fmt.Errorf("parity: tokenize %s: %d results for %d texts", model, len(res.Texts), len(texts))
	}
	for i := range res.Texts {
		if res.Texts[i] == nil {
			res.Texts[i] = []int32{}
		}
	}
	return res.Texts, nil
}

// Detokenize runs llama_detokenize. removeSpecial drops a leading BOS and
// trailing EOS the model adds; unparseSpecial renders special tokens as text.
func (r *Ref) Detokenize(model string, tokens []int32, removeSpecial, unparseSpecial bool) ([]byte, error) {
	args := []string{"detokenize", model}
	if removeSpecial {
		args = append(args, "--remove-special")
	}
	if unparseSpecial {
		args = append(args, "--unparse-special")
	}
	out, err := r.run(tokenReader(tokens), args...)
	if err != nil {
		return nil, asLoadError(err, model)
	}
	return out, nil
}

// Pieces returns each token's llama_token_to_piece bytes (no lstrip);
// special renders special tokens' text instead of nothing.
func (r *Ref) Pieces(model string, tokens []int32, special bool) ([][]byte, error) {
	args := []string{"pieces", model}
	if special {
		args = append(args, "--special")
	}
	out, err := r.run(tokenReader(tokens), args...)
	if err != nil {
		return nil, asLoadError(err, model)
	}
	res := make([][]byte, 0, len(tokens))
	for len(out) > 0 {
		if len(out) < 4 {
			return nil, fmt.Errorf("parity: pieces %s: truncated output", model)
		}
		n := binary.LittleEndian.Uint32(out)
		if uint64(n) > uint64(len(out)-4) {
			return nil, fmt.Errorf("parity: pieces %s: truncated output", model)
		}
		res = append(res, out[4:4+n:4+n])
		out = out[4+n:]
	}
	if len(res) != len(tokens) {
		return nil, fmt.Errorf("parity: pieces %s: got %d pieces for %d tokens", model, len(res), len(tokens))
	}
	return res, nil
}

func tokenReader(tokens []int32) io.Reader {
	b := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(t))
	}
	return bytes.NewReader(b)
}
