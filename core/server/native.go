package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/k3-inference/k3/core/sample"
)

// nativeRequest is the body of llama-server's /completion and /infill.
type nativeRequest struct {
	Prompt json.RawMessage `json:"prompt"`
	samplingFields
	NProbs            int             `json:"n_probs"`
	PostSamplingProbs bool            `json:"post_sampling_probs"`
	CachePrompt       *bool           `json:"cache_prompt"` // k3 always reuses the cached prefix
	ReturnTokens      bool            `json:"return_tokens"`
	InputPrefix       *string         `json:"input_prefix"`
	InputSuffix       *string         `json:"input_suffix"`
	InputExtra        json.RawMessage `json:"input_extra"`
}

// nativeResult is llama-server's non-OAI completion result (final, or a
// stream's partial chunk when Stop is false; server-task.cpp).
type nativeResult struct {
	Index              int            `json:"index"`
	Content            string         `json:"content"`
	Tokens             []int32        `json:"tokens"`
	IDSlot             int            `json:"id_slot"`
	Stop               bool           `json:"stop"`
	Model              string         `json:"model,omitempty"`
	TokensPredicted    int            `json:"tokens_predicted"`
	TokensEvaluated    int            `json:"tokens_evaluated"`
	GenerationSettings map[string]any `json:"generation_settings,omitempty"`
	Prompt             *string        `json:"prompt,omitempty"`
	HasNewLine         *bool          `json:"has_new_line,omitempty"`
	Truncated          *bool          `json:"truncated,omitempty"`
	StopType           string         `json:"stop_type,omitempty"`
	StoppingWord       *string        `json:"stopping_word,omitempty"`
	TokensCached       *int           `json:"tokens_cached,omitempty"`
	Timings            *timings       `json:"timings,omitempty"`
	Probs              []tokenProb    `json:"completion_probabilities,omitempty"`
	Error              *apiError      `json:"error,omitempty"`
}

// nativeCompletion answers llama-server's /completion.
func (s *Server) nativeCompletion(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	var req nativeRequest
	if aerr := s.readJSON(c, &req); aerr != nil {
		return aerr
	}
	if len(req.Prompt) == 0 || bytes.Equal(bytes.TrimSpace(req.Prompt), []byte("null")) {
		return errInvalid(`"prompt" must be provided`)
	}
	toks, aerr := mixedPrompt(b, req.Prompt)
	if aerr != nil {
		return aerr
	}
	return s.runNative(c, b, &req, toks)
}

// mixedPrompt tokenizes llama-server's prompt forms: a string, token ids,
// or a mix of both ([12, "text", 34]); the first string piece gets the
// model's BOS. Several prompts in one request are refused.
func mixedPrompt(b Backend, raw json.RawMessage) ([]int32, *apiError) {
	raw = bytes.TrimSpace(raw)
	if raw[0] == '"' {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return nil, errBadRequest("prompt: " + err.Error())
		}
		toks, err := b.Tokenize(text, true, true)
		if err != nil {
			return nil, errInvalid("tokenize prompt: " + err.Error())
		}
		return toks, nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, errBadRequest("prompt must be a string, an array of token ids and strings, or a one-element array of either")
	}
	if len(elems) == 1 {
		if e := bytes.TrimSpace(elems[0]); len(e) > 0 && (e[0] == '"' || e[0] == '[') {
			return mixedPrompt(b, e)
		}
	}
	var toks []int32
	strs := 0
	for i, e := range elems {
		e = bytes.TrimSpace(e)
		if len(e) > 0 && e[0] == '"' {
			var text string
			_ = json.Unmarshal(e, &text)
			t, err := b.Tokenize(text, i == 0, true)
			if err != nil {
				return nil, errInvalid("tokenize prompt: " + err.Error())
			}
			toks = append(toks, t...)
			strs++
			continue
		}
		var id int32
		if err := json.Unmarshal(e, &id); err != nil {
			return nil, errInvalid(fmt.Sprintf("prompt[%d] is neither a token id nor a string (only one prompt per request is supported)", i))
		}
		toks = append(toks, id)
	}
	if strs == len(elems) && strs > 1 {
		return nil, errInvalid("only one prompt per request is supported")
	}
	return toks, nil
}

// runNative generates for /completion and /infill and answers in
// llama-server's native shape, streamed as data: lines without [DONE].
// With n_cmpl (or n) > 1 the choices run together: the answer is an array
// of results with index 0..n-1 (a stream's chunks carry their index), as
// llama-server gives for several results.
func (s *Server) runNative(c echo.Context, b Backend, req *nativeRequest, toks []int32) error {
	if req.PostSamplingProbs {
		return errNotSupported("post_sampling_probs is not supported: k3 reports n_probs before sampling")
	}
	n, aerr := s.choiceCount(&req.samplingFields, true)
	if aerr != nil {
		return aerr
	}
	chs, aerr := choiceJobs(n, func() (*nativeChoice, *job, *apiError) {
		j, aerr := s.newJob("completion", b, &req.samplingFields, "", toks)
		if aerr != nil {
			return nil, nil, aerr
		}
		ch := &nativeChoice{j: j}
		if req.NProbs > 0 {
			ch.rec = &probRecorder{n: min(req.NProbs, b.ModelInfo().Vocab), texts: s.tokenTexts()}
			j.mask = ch.rec.observe
		}
		if aerr := s.constrainText(j, &req.samplingFields); aerr != nil {
			return nil, nil, aerr
		}
		ch.stops = sample.NewStopMatcher(j.stops)
		return ch, j, nil
	})
	if aerr != nil {
		return aerr
	}
	stream := chs[0].j.stream
	var w *sse
	onStart := func() error {
		if stream {
			w = s.startSSE(c)
		}
		return nil
	}
	jobs := make([]*job, n)
	emits := make([]func(Piece) error, n)
	for i, ch := range chs {
		jobs[i] = ch.j
		emits[i] = func(p Piece) error {
			out, stopped := ch.stops.Feed(p.Text)
			ch.text.WriteString(out)
			real := p.Token >= 0 // not the flush of an incomplete character
			var prob []tokenProb
			if real {
				ch.generated = append(ch.generated, p.Token)
				if ch.rec != nil {
					prob = []tokenProb{ch.rec.entry(p.Token)}
					ch.probs = append(ch.probs, prob[0])
				}
			}
			if w != nil && (out != "" || prob != nil || (req.ReturnTokens && real)) {
				chunk := nativeResult{Index: i, Content: out, Tokens: []int32{}, TokensPredicted: len(ch.generated), TokensEvaluated: len(ch.j.prompt)}
				if req.ReturnTokens && real {
					chunk.Tokens = []int32{p.Token}
				}
				chunk.Probs = prob
				if err := w.send(chunk); err != nil {
					return err
				}
			}
			if stopped {
				ch.word = true
				return ErrStop
			}
			return nil
		}
	}
	res, err := s.runN(c, b, jobs, onStart, emits)
	cut := errors.Is(err, errInterrupted)
	if err != nil && !cut {
		if w == nil {
			return quietIfGone(err)
		}
		if !errors.Is(err, errClientGone) {
			w.sendError(s.publicError(c, err))
		}
		return nil
	}
	finals := make([]nativeResult, n)
	for i, ch := range chs {
		tail := ch.stops.Flush()
		ch.text.WriteString(tail)
		final := s.nativeFinal(b, ch.j, res[i], ch.word)
		final.Index = i
		final.Content = ch.text.String()
		if w != nil {
			final.Content = tail
		}
		if req.ReturnTokens {
			final.Tokens = ch.generated
		}
		if ch.rec != nil && w == nil {
			final.Probs = ch.probs
		}
		final.GenerationSettings["n_probs"] = req.NProbs
		if cut {
			final.Error = errCutShort()
		}
		finals[i] = final
	}
	if w == nil {
		if n == 1 {
			return s.writeJSON(c, finals[0])
		}
		return s.writeJSON(c, finals)
	}
	for _, f := range finals {
		if w.send(f) != nil {
			return nil
		}
	}
	return nil
}

// nativeChoice is one choice of a native completion: its job, stop
// strings and n_probs recorder, and what it generated.
type nativeChoice struct {
	j         *job
	stops     *sample.StopMatcher
	rec       *probRecorder // nil: no n_probs
	text      strings.Builder
	generated []int32
	probs     []tokenProb
	word      bool // ended by a stop string
}

// nativeFinal is the last result of a native completion, content aside.
func (s *Server) nativeFinal(b Backend, j *job, res GenerateResult, word bool) nativeResult {
	stopType := "eos"
	switch {
	case word:
		stopType = "word"
	case res.Finish == sample.FinishLength:
		stopType = "limit"
	}
	prompt, _ := b.Detokenize(j.prompt)
	f, no, empty := false, false, ""
	cached := res.CachedTokens
	settings := generationSettings(j.sampling, j.maxTokens, j.stream)
	// The full form (task_params::to_json) adds what the request asked for.
	settings["stop"] = append([]string{}, j.stops...)
	settings["ignore_eos"] = j.ignoreEOS
	settings["logit_bias"] = logitBiasJSON(j.sampling.LogitBias)
	return nativeResult{Tokens: []int32{}, Stop: true, Model: s.modelID(b), TokensPredicted: res.GeneratedTokens,
		TokensEvaluated: res.PromptTokens, GenerationSettings: settings,
		Prompt: &prompt, HasNewLine: &f, Truncated: &no, StopType: stopType, StoppingWord: &empty,
		TokensCached: &cached, Timings: timingsOf(res)}
}

// infill answers llama-server's /infill: the model's fill-in-the-middle
// tokens around input_prefix and input_suffix, then prompt after the
// middle token (format_prompt_infill, without repository context).
func (s *Server) infill(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	fim := FIM{Pre: -1, Suf: -1, Mid: -1, Rep: -1, Sep: -1}
	if fb, ok := b.(FIMBackend); ok {
		fim = fb.FIMTokens()
	}
	if missing := fim.missing(); missing != "" {
		return errNotSupported("Infill is not supported by this model: " + missing)
	}
	var req nativeRequest
	if aerr := s.readJSON(c, &req); aerr != nil {
		return aerr
	}
	if req.InputPrefix == nil && req.InputSuffix == nil {
		return errInvalid(`"input_prefix" or "input_suffix" must be provided`)
	}
	extra, aerr := parseInputExtra(req.InputExtra)
	if aerr != nil {
		return aerr
	}
	var prompt []int32
	if p := bytes.TrimSpace(req.Prompt); len(p) > 0 && !bytes.Equal(p, []byte("null")) && !bytes.Equal(p, []byte(`""`)) {
		var text string
		if err := json.Unmarshal(p, &text); err != nil {
			return errBadRequest("prompt must be a string")
		}
		var err error
		if prompt, err = b.Tokenize(text, false, true); err != nil {
			return errInvalid("tokenize: " + err.Error())
		}
	}
	bos, _ := b.Tokenize("", true, false) // the BOS the model adds, if any
	l := infillLayout{fim: fim, bos: bos, nBatch: s.opts.Batch, nPredict: s.opts.Defaults.NPredict,
		nCtx: b.ModelInfo().ContextLength, spm: s.opts.SPMInfill}
	if l.nBatch <= 0 {
		l.nBatch = DefaultBatch
	}
	if l.nPredict == 0 {
		l.nPredict = -1
	}
	toks, err := infillPrompt(func(text string) ([]int32, error) { return b.Tokenize(text, false, false) },
		l, deref(req.InputPrefix), deref(req.InputSuffix), extra, prompt)
	if err != nil {
		return errInvalid("tokenize: " + err.Error())
	}
	return s.runNative(c, b, &req, toks)
}

// logitBiasJSON is llama-server's format_logit_bias, sorted by token: a
// banned token's -inf bias is null, as nlohmann's JSON writes it.
func logitBiasJSON(bias map[int32]float32) []map[string]any {
	out := make([]map[string]any, 0, len(bias))
	for tok, b := range bias {
		var v any = b
		if math.IsInf(float64(b), 0) || math.IsNaN(float64(b)) {
			v = nil
		}
		out = append(out, map[string]any{"bias": v, "token": tok})
	}
	sort.Slice(out, func(i, k int) bool { return out[i]["token"].(int32) < out[k]["token"].(int32) })
	return out
}
