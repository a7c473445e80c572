package server

import (
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/k3-inference/k3/core/buildinfo"
	"github.com/k3-inference/k3/core/sample"
)

// llamaRoutes adds llama-server's own endpoints (shapes from its
// tools/server/server-context.cpp) and the OpenAI routes k3 answers
// without serving them: /v1/models/{id} and embeddings.
func (s *Server) llamaRoutes(e *echo.Echo, get func(string, echo.HandlerFunc)) {
	get("/props", s.props)
	e.POST("/props", s.postProps)
	get("/slots", s.slots)
	e.POST("/completion", s.nativeCompletion, requireJSON)
	e.POST("/infill", s.infill, requireJSON)
	e.POST("/apply-template", s.applyTemplate, requireJSON)
	for _, p := range []string{"/v1/models/:id", "/models/:id"} {
		get(p, s.model)
	}
	for _, p := range []string{"/v1/embeddings", "/embeddings", "/embedding"} {
		e.POST(p, s.embeddings)
	}
}

// generationSettings is llama-server's task_params::to_json for what k3
// samples with; the samplers k3 lacks show their disabled values.
func generationSettings(cfg sample.Config, nPredict int, stream bool) map[string]any {
	return map[string]any{
		"seed": cfg.Seed, "temperature": cfg.Temperature, "dynatemp_range": 0.0, "dynatemp_exponent": 1.0,
		"top_k": cfg.TopK, "top_p": cfg.TopP, "min_p": cfg.MinP, "top_n_sigma": -1.0,
		"xtc_probability": 0.0, "xtc_threshold": 0.1, "typical_p": 1.0,
		"repeat_last_n": cfg.PenaltyLastN, "repeat_penalty": cfg.RepeatPenalty,
		"presence_penalty": cfg.PresencePenalty, "frequency_penalty": cfg.FrequencyPenalty,
		"dry_multiplier": 0.0, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1,
		"mirostat": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1,
		"max_tokens": nPredict, "n_predict": nPredict, "n_keep": 0, "n_discard": 0,
		"ignore_eos": false, "stream": stream, "n_probs": 0, "min_keep": cfg.MinKeep,
		"samplers":          []string{"penalties", "top_k", "top_p", "min_p", "temperature"},
		"timings_per_token": false, "post_sampling_probs": false, "lora": []any{},
	}
}

// defaultSettings is what a request that sets nothing samples with.
func (s *Server) defaultSettings(info ModelInfo) map[string]any {
	var f samplingFields
	s.opts.Defaults.apply(&f, info.ContextLength)
	cfg, _ := samplingConfig(&f, info)
	if f.Seed == nil {
		cfg.Seed = 0xFFFFFFFF // llama-server's LLAMA_DEFAULT_SEED: random per request
	}
	n := -1
	if f.NPredict != nil {
		n = *f.NPredict
	}
	return generationSettings(cfg, n, false)
}

// props answers GET /props as llama-server does. model_path is the file's
// name only: the directory layout of the host is not the client's business.
func (s *Server) props(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	info := b.ModelInfo()
	tmpl := ""
	if t := b.Template(); t != nil {
		tmpl = t.Source()
	}
	return c.JSON(http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{"params": s.defaultSettings(info), "n_ctx": info.ContextLength},
		"total_slots":                 s.opts.Parallel,
		"model_alias":                 s.modelID(b),
		"model_path":                  info.File,
		"modalities":                  map[string]bool{"vision": false, "video": false, "audio": false},
		"endpoint_slots":              !s.opts.NoSlots,
		"endpoint_props":              false,
		"endpoint_metrics":            true,
		"chat_template":               tmpl,
		"bos_token":                   info.BOSToken,
		"eos_token":                   info.EOSToken,
		"build_info":                  buildInfo(),
		"is_sleeping":                 false,
	})
}

// postProps: llama-server refuses it unless started with --props, and k3
// has no global property a client may change.
func (s *Server) postProps(c echo.Context) error {
	return errNotSupported("This server does not support changing global properties.")
}

// slots answers GET /slots with the backend's slots in llama-server's
// shape (a backend that reports none is one slot). With
// ?fail_on_no_slot=1 a server with no free slot answers 503, as
// llama-server does.
func (s *Server) slots(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	if s.opts.NoSlots {
		return errNotSupported("This server does not support slots endpoint. Start it with `--slots`")
	}
	running, _ := s.queue.counts()
	if c.QueryParam("fail_on_no_slot") != "" && running >= s.opts.Parallel {
		return errUnavailable("no slot available")
	}
	info := b.ModelInfo()
	slots := []SlotInfo{{ID: 0, Context: info.ContextLength, Processing: running > 0}}
	if r, ok := b.(SlotReporter); ok {
		slots = r.Slots()
	}
	out := make([]map[string]any, len(slots))
	for i, sl := range slots {
		out[i] = map[string]any{
			"id": sl.ID, "n_ctx": sl.Context, "speculative": false, "is_processing": sl.Processing,
			"n_tokens": sl.Tokens, "params": s.defaultSettings(info),
		}
	}
	return c.JSON(http.StatusOK, out)
}

// model answers GET /v1/models/{id} (openai's client.models.retrieve).
func (s *Server) model(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	id := c.Param("id")
	if id != s.modelID(b) && !slices.Contains(s.opts.Aliases, id) {
		e := newAPIError(http.StatusNotFound, "invalid_request_error", "The model '"+id+"' does not exist")
		e.Code = "model_not_found"
		return e
	}
	return c.JSON(http.StatusOK, modelEntry{ID: s.modelID(b), Aliases: nonNil(s.opts.Aliases), Tags: nonNil(s.opts.Tags), Object: "model", Created: s.started.Unix(), OwnedBy: "k3", Meta: s.modelMeta(b)})
}

// embeddings: k3's models (Kimi K3 and its synthetic stand-ins) are causal
// decoders served for generation; the engine does not expose pooled
// hidden states, so k3 answers 501 rather than vectors of no meaning.
func (s *Server) embeddings(c echo.Context) error {
	return errNotSupported("embeddings are not supported: k3's engine does not expose pooled hidden states for this model (llama-server needs --embeddings and an embedding model)")
}

// buildInfo is llama-server's build_info ("b1234-abcdef0") for k3: its
// version and short commit, from core/buildinfo as /metrics and k3 version.
func buildInfo() string {
	bi := buildinfo.Get()
	if r := bi.ShortRevision(); r != "" {
		return "k3-" + bi.Version + "-" + r
	}
	return "k3-" + bi.Version
}

// applyTemplate answers /apply-template: the prompt the chat template
// makes of a chat request, without generating.
func (s *Server) applyTemplate(c echo.Context) error {
	b, aerr := s.ready()
	if aerr != nil {
		return aerr
	}
	tmpl := b.Template()
	if tmpl == nil {
		return errNotSupported("the model has no chat template")
	}
	var req chatRequest
	if aerr := s.readJSON(c, &req); aerr != nil {
		return aerr
	}
	in, _, aerr := chatInput(&req, b.ModelInfo(), &s.opts)
	if aerr != nil {
		return aerr
	}
	text, err := tmpl.Render(in)
	if err != nil {
		return errInvalid("chat template: " + err.Error())
	}
	return c.JSON(http.StatusOK, map[string]string{"prompt": text})
}
