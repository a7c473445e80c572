package server

import (
	"net/http"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// health answers as llama-server does: 503 "Loading model" until the
// backend is set, then {"status":"ok"}, or 503 "degraded" with the reason
// while a part of the backend is down or restarting (its requests fail).
func (s *Server) health(c echo.Context) error {
	b, err := s.ready()
	if err != nil {
		return err
	}
	if h, ok := b.(HealthReporter); ok {
		if herr := h.Health(); herr != nil {
			return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": "degraded",
				"error": errUnavailable(herr.Error())})
		}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

type modelEntry struct {
	ID      string         `json:"id"`
	Aliases []string       `json:"aliases"`
	Tags    []string       `json:"tags"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	OwnedBy string         `json:"owned_by"`
	Meta    map[string]any `json:"meta"`
}

func (s *Server) models(c echo.Context) error {
	b, err := s.ready()
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{
		"object": "list",
		"data":   []modelEntry{{ID: s.modelID(b), Aliases: nonNil(s.opts.Aliases), Tags: nonNil(s.opts.Tags), Object: "model", Created: s.started.Unix(), OwnedBy: "k3", Meta: s.modelMeta(b)}},
	})
}

func (s *Server) modelMeta(b Backend) map[string]any {
	info := b.ModelInfo()
	return map[string]any{"arch": info.Arch, "n_vocab": info.Vocab, "n_ctx": info.ContextLength,
		"n_params": info.Params, "size": info.Size}
}

type tokenizeRequest struct {
	Content      *string `json:"content"`
	AddSpecial   bool    `json:"add_special"`
	ParseSpecial *bool   `json:"parse_special"`
	WithPieces   bool    `json:"with_pieces"`
}

type tokenPiece struct {
	ID    int32 `json:"id"`
	Piece any   `json:"piece"` // a string, or its bytes when not valid UTF-8
}

// tokenize answers llama-server's /tokenize: {"tokens":[ids]} or, with
// with_pieces, {"tokens":[{"id","piece"}]}.
func (s *Server) tokenize(c echo.Context) error {
	b, err := s.ready()
	if err != nil {
		return err
	}
	var req tokenizeRequest
	if aerr := s.readJSON(c, &req); aerr != nil {
		return aerr
	}
	if req.Content == nil {
		return c.JSON(http.StatusOK, map[string]any{"tokens": []int32{}})
	}
	parseSpecial := req.ParseSpecial == nil || *req.ParseSpecial
	toks, terr := b.Tokenize(*req.Content, req.AddSpecial, parseSpecial)
	if terr != nil {
		return errInvalid("tokenize: " + terr.Error())
	}
	if !req.WithPieces {
		return c.JSON(http.StatusOK, map[string]any{"tokens": toks})
	}
	out := make([]tokenPiece, len(toks))
	for i, t := range toks {
		text, derr := b.Detokenize([]int32{t})
		if derr != nil {
			return &internalError{what: "detokenize", err: derr}
		}
		out[i] = tokenPiece{ID: t, Piece: text}
		if !utf8.ValidString(text) {
			raw := make([]int, len(text))
			for j := 0; j < len(text); j++ {
				raw[j] = int(text[j])
			}
			out[i].Piece = raw
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"tokens": out})
}

func (s *Server) detokenize(c echo.Context) error {
	b, err := s.ready()
	if err != nil {
		return err
	}
	var req struct {
		Tokens []int32 `json:"tokens"`
	}
	if aerr := s.readJSON(c, &req); aerr != nil {
		return aerr
	}
	vocab := b.ModelInfo().Vocab
	for i, t := range req.Tokens {
		if t < 0 || int(t) >= vocab {
			return errInvalid("tokens[" + itoa(i) + "] = " + itoa(int(t)) + " is outside the vocabulary (0.." + itoa(vocab-1) + ")")
		}
	}
	text, derr := b.Detokenize(req.Tokens)
	if derr != nil {
		return errInvalid("detokenize: " + derr.Error())
	}
	return c.JSON(http.StatusOK, map[string]string{"content": text})
}

// nonNil makes a missing list an empty JSON array, as llama-server writes
// an empty set.
func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}
