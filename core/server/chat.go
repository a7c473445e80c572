package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/sample"
)

var knownRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// chatInput validates a chat request and turns it into template input,
// with what its tool_choice forces.
func chatInput(req *chatRequest, info ModelInfo, o *Options) (chat.Input, toolForce, *apiError) {
	in := chat.Input{AddGenerationPrompt: true, BOSToken: info.BOSToken, EOSToken: info.EOSToken, Kwargs: req.ChatTemplateKwargs}
	if len(req.Messages) == 0 {
		return in, toolForce{}, errInvalid("messages must hold at least one message")
	}
	cont, aerr := checkTurns(req, !o.NoPrefillAssistant)
	if aerr != nil {
		return in, toolForce{}, aerr
	}
	in.Continue = cont
	in.AddGenerationPrompt = cont == chat.ContinueNone && (req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
	for i, m := range req.Messages {
		if !knownRoles[m.Role] {
			return in, toolForce{}, errInvalid(fmt.Sprintf("messages[%d]: unknown role %q (want system, developer, user, assistant or tool)", i, m.Role))
		}
		if !m.Content.isSet && len(m.ToolCalls) == 0 && m.Role != "assistant" {
			return in, toolForce{}, errInvalid(fmt.Sprintf("messages[%d]: %s message has no content", i, m.Role))
		}
		in.Messages = append(in.Messages, chat.Message{
			Role: m.Role, Content: m.Content.Text, Parts: m.Content.Parts, ReasoningContent: m.ReasoningContent,
			Name: m.Name, ToolCallID: m.ToolCallID, ToolCalls: m.ToolCalls,
		})
	}
	if v, ok := req.ChatTemplateKwargs["enable_thinking"]; ok {
		var on bool
		if err := json.Unmarshal(v, &on); err != nil {
			return in, toolForce{}, errInvalid("chat_template_kwargs.enable_thinking must be a boolean")
		}
		in.EnableThinking = &on
	} else if d := o.Defaults.EnableThinking; d != nil {
		on := *d
		in.EnableThinking = &on
	}
	tools, force, aerr := chatTools(req)
	if aerr != nil {
		return in, force, aerr
	}
	in.Tools = tools
	return in, force, nil
}

// checkTurns applies llama-server's rules on how a conversation may end
// (oaicompat_chat_params_parse), with its messages, and says whether the
// last message is to be continued: when continue_final_message asks, or,
// with prefill (llama-server's default, --no-prefill-assistant turns it
// off), when the conversation ends with an assistant message.
func checkTurns(req *chatRequest, prefill bool) (chat.Continue, *apiError) {
	msgs := req.Messages
	cont := chat.ContinueNone
	if v := bytes.TrimSpace(req.ContinueFinalMessage); len(v) > 0 {
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return cont, errInvalid("continue_final_message must be a boolean or \"content\" / \"reasoning_content\"")
		}
		cont = chat.ParseContinue(x)
	}
	n := len(msgs)
	last := msgs[n-1].Role == "assistant"
	if cont == chat.ContinueNone && last && n >= 2 && msgs[n-2].Role == "assistant" {
		return cont, errInvalid("Cannot have 2 or more assistant messages at the end of the list.")
	}
	if cont == chat.ContinueNone && prefill && last {
		return chat.ContinueAuto, nil
	}
	if cont == chat.ContinueNone {
		return cont, nil
	}
	if req.AddGenerationPrompt == nil || *req.AddGenerationPrompt {
		return cont, errInvalid("Cannot set both add_generation_prompt and continue_final_message to true.")
	}
	if !last {
		return cont, errInvalid("continue_final_message needs the conversation to end with an assistant message")
	}
	if len(msgs[n-1].ToolCalls) > 0 {
		return cont, errInvalid(chat.ErrContinueToolCalls.Error())
	}
	return cont, nil
}

// toolForce is what tool_choice demands of a reply: nothing, a call of any
// of the tools ("required" among several) or of the named one.
type toolForce struct {
	call bool
	name string
}

// tokenTexts is every token's text (with control tokens as their text),
// made once per backend.
func (s *Server) tokenTexts() []string {
	box := s.backend.Load()
	if box == nil {
		return nil
	}
	box.textsOnce.Do(func() {
		n := box.b.ModelInfo().Vocab
		box.texts = make([]string, n)
		for t := range n {
			box.texts[t], _ = box.b.Detokenize([]int32{int32(t)})
		}
	})
	return box.texts
}

// chatTools returns the tools the template sees (none when tool_choice is
// "none") and what tool_choice forces: "required" with one tool and a
// named function force a call of that tool, "required" among several a
// call whose tool the model names, held to the declared ones
// (chat.ForcedCall, chatConstraint).
func chatTools(req *chatRequest) ([]chat.Tool, toolForce, *apiError) {
	var force toolForce
	var tools []chat.Tool
	for i, t := range req.Tools {
		if t.Type != "function" {
			return nil, force, errInvalid(fmt.Sprintf("tools[%d]: type %q is not supported (want function)", i, t.Type))
		}
		if t.Function.Name == "" {
			return nil, force, errInvalid(fmt.Sprintf("tools[%d]: function has no name", i))
		}
		if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && p[0] != '{' && !bytes.Equal(p, []byte("null")) {
			return nil, force, errInvalid(fmt.Sprintf("tools[%d]: parameters must be a JSON Schema object", i))
		}
		tools = append(tools, chat.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	choice := bytes.TrimSpace(req.ToolChoice)
	switch {
	case len(choice) == 0 || bytes.Equal(choice, []byte("null")):
	case choice[0] == '"':
		var s string
		_ = json.Unmarshal(choice, &s)
		switch s {
		case "none":
			return nil, force, nil
		case "auto":
		case "required":
			if len(tools) == 0 {
				return nil, force, errInvalid(`tool_choice "required" needs tools`)
			}
			force.call = true
			if len(tools) == 1 {
				force.name = tools[0].Name
			}
		default:
			return nil, force, errInvalid(fmt.Sprintf("tool_choice %q is not none, auto, required or a function", s))
		}
	case choice[0] == '{':
		var named struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(choice, &named); err != nil || named.Function.Name == "" {
			return nil, force, errInvalid("tool_choice object must name a function")
		}
		found := false
		for _, t := range tools {
			found = found || t.Name == named.Function.Name
		}
		if !found {
			return nil, force, errInvalid(fmt.Sprintf("tool_choice names %q, which is not among the tools", named.Function.Name))
		}
		force = toolForce{call: true, name: named.Function.Name}
	default:
		return nil, force, errBadRequest("tool_choice must be a string or an object")
	}
	return tools, force, nil
}

// chatMessageOut is choices[].message of a whole reply.
type chatMessageOut struct {
	Role             string          `json:"role"`
	Content          *string         `json:"content"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []chat.ToolCall `json:"tool_calls,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      *chatMessageOut `json:"message,omitempty"`
	Delta        *chatDelta      `json:"delta,omitempty"`
	Logprobs     any             `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

type chatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             *usage       `json:"usage,omitempty"`
	Timings           *timings     `json:"timings,omitempty"`
	// Error marks a stream's last chunk when shutdown cut it short.
	Error *apiError `json:"error,omitempty"`
}

func (s *Server) chatCompletions(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	var req chatRequest
	if aerr := s.readJSON(c, &req); aerr != nil {
		return aerr
	}
	n, aerr := s.choiceCount(&req.samplingFields, true)
	if aerr != nil {
		return aerr
	}
	cjs, aerr := choiceJobs(n, func() (*chatJob, *job, *apiError) {
		cj, aerr := s.prepareChat(b, &req, "chat")
		if aerr != nil {
			return nil, nil, aerr
		}
		return cj, cj.j, nil
	})
	if aerr != nil {
		return aerr
	}
	resp := chatResponse{ID: newID("chatcmpl-"), Object: "chat.completion", Created: time.Now().Unix(),
		Model: s.modelID(b), SystemFingerprint: "k3"}
	if cjs[0].j.stream {
		return s.streamChat(c, b, cjs, resp)
	}
	return s.wholeChat(c, b, cjs, resp)
}

// chatJob is a chat request ready to run: the job and how its reply is
// parsed. Every chat-shaped API (chat completions, responses, messages)
// turns its request into a chatRequest and runs it through here.
type chatJob struct {
	j      *job
	popts  chat.ParseOptions
	forced string // the reply's start that tool_choice wrote into the prompt
	// probs, when logprobs were asked for, records each step; logprobs
	// are the generated tokens' entries so far, sent of them streamed.
	probs    *probRecorder
	logprobs []tokenProb
	sent     int
}

// prepareChat renders a chat request with the model's template and makes
// its job.
func (s *Server) prepareChat(b Backend, req *chatRequest, route string) (*chatJob, *apiError) {
	tmpl := b.Template()
	if tmpl == nil {
		return nil, newAPIError(http.StatusNotImplemented, "not_supported_error", "the model has no chat template; use /v1/completions")
	}
	in, force, aerr := chatInput(req, b.ModelInfo(), &s.opts)
	if aerr != nil {
		return nil, aerr
	}
	text, err := tmpl.Render(in)
	if err != nil {
		return nil, errInvalid("chat template: " + err.Error())
	}
	popts, err := tmpl.ParseOptions(in)
	if err != nil {
		return nil, errInvalid("chat template: " + err.Error())
	}
	switch req.ReasoningFormat {
	case "", "auto", "deepseek":
	case "none":
		popts.ReasoningNone = true
	default:
		return nil, errInvalid(fmt.Sprintf("reasoning_format %q is not none, auto or deepseek", req.ReasoningFormat))
	}
	var forced string
	if force.call {
		forced = chat.ForcedCall(popts, force.name)
		text += forced
	}
	j, aerr := s.newJob(route, b, &req.samplingFields, text, nil)
	if aerr != nil {
		return nil, aerr
	}
	if j.mask, aerr = s.chatConstraint(req, popts, force); aerr != nil {
		return nil, aerr
	}
	j.special = true
	cj := &chatJob{j: j, popts: popts, forced: forced}
	top, aerr := chatTopLogprobs(req)
	if aerr != nil {
		return nil, aerr
	}
	if top >= 0 {
		cj.probs = &probRecorder{n: top, texts: s.tokenTexts()}
		j.mask = chainMasks(cj.probs.observe, j.mask) // raw logits, before the grammar
	}
	return cj, nil
}

// chatTopLogprobs validates logprobs and top_logprobs: -1 when no
// log-probabilities are wanted, else how many alternatives (0..20, as
// OpenAI allows).
func chatTopLogprobs(req *chatRequest) (int, *apiError) {
	on := req.Logprobs != nil && *req.Logprobs
	if req.TopLogprobs != nil && !on {
		return -1, errInvalid("top_logprobs requires logprobs to be set to true")
	}
	if !on {
		return -1, nil
	}
	if req.TopLogprobs == nil {
		return 0, nil
	}
	if n := *req.TopLogprobs; n < 0 || n > 20 {
		return -1, errInvalid(fmt.Sprintf("top_logprobs = %d is outside [0, 20]", n))
	}
	return *req.TopLogprobs, nil
}

// chatOutcome is a finished chat generation.
type chatOutcome struct {
	res    GenerateResult
	parsed chat.Parsed
	stop   string // the stop string that ended it, if one did
}

// runChat generates a prepared chat: start runs once the engine is ours,
// out (may be nil) gets the parsed reply's deltas as they come, the
// forced start's first. A generation that shutdown cut short returns
// errInterrupted with the reply so far, closed.
func (s *Server) runChat(c echo.Context, b Backend, cj *chatJob, start func() error, out func([]chat.Delta) error) (chatOutcome, error) {
	var each func(int, []chat.Delta) error
	if out != nil {
		each = func(_ int, ds []chat.Delta) error { return out(ds) }
	}
	o, err := s.runChats(c, b, []*chatJob{cj}, start, each)
	return o[0], err
}

// runChats is runChat for the choices of one request (n): out gets
// each choice's deltas with its index, never two at once.
func (s *Server) runChats(c echo.Context, b Backend, cjs []*chatJob, start func() error, out func(int, []chat.Delta) error) ([]chatOutcome, error) {
	if out == nil {
		out = func(int, []chat.Delta) error { return nil }
	}
	jobs := make([]*job, len(cjs))
	filters := make([]*replyFilter, len(cjs))
	emits := make([]func(Piece) error, len(cjs))
	for i, cj := range cjs {
		jobs[i] = cj.j
		f := &replyFilter{stops: sample.NewStopMatcher(cj.j.stops), parser: chat.NewParser(cj.popts)}
		filters[i] = f
		emits[i] = func(p Piece) error {
			if cj.probs != nil && p.Token >= 0 {
				cj.logprobs = append(cj.logprobs, cj.probs.entry(p.Token))
			}
			if err := out(i, f.feed(p.Text)); err != nil {
				return err
			}
			if f.stopped {
				return ErrStop
			}
			return nil
		}
	}
	res, err := s.runN(c, b, jobs, func() error {
		if err := start(); err != nil {
			return err
		}
		for i, cj := range cjs {
			if err := out(i, filters[i].parser.Feed(cj.forced)); err != nil {
				return err
			}
		}
		return nil
	}, emits)
	outs := make([]chatOutcome, len(cjs))
	for i := range outs {
		outs[i].res = res[i]
	}
	if err != nil && !errors.Is(err, errInterrupted) {
		return outs, err
	}
	for i, f := range filters {
		if cerr := out(i, f.close()); cerr != nil {
			return outs, cerr
		}
		outs[i].parsed, outs[i].stop = f.parser.Result(), f.stops.Matched()
	}
	return outs, err
}

// newJob tokenizes a prompt (unless tokens are given) and validates the
// sampling fields against it.
func (s *Server) newJob(route string, b Backend, f *samplingFields, text string, tokens []int32) (*job, *apiError) {
	info := b.ModelInfo()
	s.opts.Defaults.apply(f, info.ContextLength)
	if tokens == nil {
		var err error
		if tokens, err = b.Tokenize(text, true, true); err != nil {
			return nil, errInvalid("tokenize prompt: " + err.Error())
		}
	}
	if len(tokens) == 0 {
		return nil, errInvalid("the prompt is empty")
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= info.Vocab {
			return nil, errInvalid(fmt.Sprintf("prompt[%d] = %d is outside the vocabulary (0..%d)", i, t, info.Vocab-1))
		}
	}
	n, aerr := maxTokens(f, len(tokens), info.ContextLength)
	if aerr != nil {
		return nil, aerr
	}
	cfg, aerr := samplingConfig(f, info)
	if aerr != nil {
		return nil, aerr
	}
	if _, aerr := s.choiceCount(f, route == "chat" || route == "completions" || route == "completion"); aerr != nil {
		return nil, aerr
	}
	for i, st := range f.Stop {
		if st == "" {
			return nil, errInvalid(fmt.Sprintf("stop[%d] is empty", i))
		}
	}
	return &job{route: route, prompt: tokens, sampling: cfg, maxTokens: n, stops: f.Stop, ignoreEOS: f.IgnoreEOS, stream: f.Stream,
		includeUsage: f.StreamOptions != nil && f.StreamOptions.IncludeUsage}, nil
}

// replyFilter applies stop strings, then the reply parser, to generated text.
type replyFilter struct {
	stops   *sample.StopMatcher
	parser  *chat.Parser
	stopped bool
}

func (f *replyFilter) feed(text string) []chat.Delta {
	emit, stopped := f.stops.Feed(text)
	f.stopped = f.stopped || stopped
	return f.parser.Feed(emit)
}

func (f *replyFilter) close() []chat.Delta {
	var out []chat.Delta
	if !f.stopped {
		out = f.parser.Feed(f.stops.Flush())
	}
	return append(out, f.parser.Close()...)
}

func finishReason(r GenerateResult, parsed chat.Parsed) string {
	if r.Finish == sample.FinishLength {
		return "length"
	}
	if len(parsed.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func (s *Server) wholeChat(c echo.Context, b Backend, cjs []*chatJob, resp chatResponse) error {
	outs, err := s.runChats(c, b, cjs, func() error { return nil }, nil)
	if err != nil {
		return quietIfGone(cutShort(err))
	}
	res := make([]GenerateResult, len(outs))
	for i, o := range outs {
		parsed := o.parsed
		msg := &chatMessageOut{Role: "assistant", ReasoningContent: parsed.Reasoning, ToolCalls: parsed.ToolCalls}
		if parsed.Content != "" || len(parsed.ToolCalls) == 0 {
			msg.Content = &parsed.Content
		}
		fr := finishReason(o.res, parsed)
		ch := chatChoice{Index: i, Message: msg, FinishReason: &fr}
		if cjs[i].probs != nil {
			ch.Logprobs = chatLogprobsOf(cjs[i].logprobs)
		}
		resp.Choices = append(resp.Choices, ch)
		res[i] = o.res
	}
	all := combine(res)
	resp.Usage, resp.Timings = usageOf(all), timingsOf(all)
	return s.writeJSON(c, resp)
}

// quietIfGone swallows the error of a request whose client left: there is
// no one to tell.
func quietIfGone(err error) error {
	if errors.Is(err, errClientGone) {
		return nil
	}
	return err
}

func strp(s string) *string { return &s }

func deltaOut(d chat.Delta) *chatDelta {
	switch {
	case d.ToolCall != nil:
		tc := toolCallDelta{Index: d.ToolCall.Index, ID: d.ToolCall.ID}
		if d.ToolCall.ID != "" {
			tc.Type = "function"
		}
		tc.Function.Name, tc.Function.Arguments = d.ToolCall.Name, d.ToolCall.Arguments
		return &chatDelta{ToolCalls: []toolCallDelta{tc}}
	case d.Reasoning != "":
		return &chatDelta{ReasoningContent: d.Reasoning}
	case d.Content != "":
		return &chatDelta{Content: strp(d.Content)}
	}
	return nil
}

func (s *Server) streamChat(c echo.Context, b Backend, cjs []*chatJob, resp chatResponse) error {
	resp.Object = "chat.completion.chunk"
	chunk := func(i int, d *chatDelta, finish *string) chatResponse {
		r := resp
		r.Choices = []chatChoice{{Index: i, Delta: d, FinishReason: finish}}
		return r
	}
	// pending attaches the log-probabilities of choice i's tokens not yet
	// sent to a chunk: a chunk carries those of the tokens up to its text.
	pending := func(i int, r *chatResponse) {
		cj := cjs[i]
		if cj.probs != nil && cj.sent < len(cj.logprobs) {
			r.Choices[0].Logprobs = chatLogprobsOf(cj.logprobs[cj.sent:])
			cj.sent = len(cj.logprobs)
		}
	}
	var w *sse
	sendDeltas := func(i int, ds []chat.Delta) error {
		var outs []*chatDelta
		for _, d := range ds {
			if out := deltaOut(d); out != nil {
				outs = append(outs, out)
			}
		}
		for k, out := range outs {
			c := chunk(i, out, nil)
			if k == len(outs)-1 {
				pending(i, &c)
			}
			if err := w.send(c); err != nil {
				return err
			}
		}
		return nil
	}
	start := func() error {
		w = s.startSSE(c)
		for i := range cjs {
			if err := w.send(chunk(i, &chatDelta{Role: "assistant", Content: strp("")}, nil)); err != nil {
				return err
			}
		}
		return nil
	}
	outs, err := s.runChats(c, b, cjs, start, sendDeltas)
	if w == nil { // never started: the error can still be a plain response
		return quietIfGone(err)
	}
	cut := errors.Is(err, errInterrupted)
	if err != nil && !cut {
		if !errors.Is(err, errClientGone) {
			w.sendError(s.publicError(c, err))
		}
		return nil
	}
	res := make([]GenerateResult, len(outs))
	for i, o := range outs {
		res[i] = o.res
		fr := finishReason(o.res, o.parsed)
		last := chunk(i, &chatDelta{}, &fr)
		pending(i, &last)
		if i == len(outs)-1 {
			last.Timings = timingsOf(combine(res))
		}
		if cut {
			fr, last.Error = "stop", errCutShort()
		}
		if w.send(last) != nil {
			return nil
		}
	}
	if cjs[0].j.includeUsage {
		u := resp
		u.Choices = []chatChoice{}
		u.Usage = usageOf(combine(res))
		if w.send(u) != nil {
			return nil
		}
	}
	_ = w.raw("data: [DONE]\n\n")
	return nil
}
