package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
)

// apiError is an error answered in OpenAI's shape,
// {"error":{"message","type","code"}}, with llama-server's type names.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
	// RequestID is the id the server log files the request under.
	RequestID string `json:"request_id,omitempty"`
	// RetryAfter, in seconds, is sent as a Retry-After header when set.
	RetryAfter int `json:"-"`
}

func (e *apiError) Error() string { return e.Message }

func newAPIError(status int, typ, msg string) *apiError {
	return &apiError{Status: status, Message: msg, Type: typ, Code: status}
}

func errBadRequest(msg string) *apiError {
	return newAPIError(http.StatusBadRequest, "invalid_request_error", msg)
}

// errInvalid is for a well-formed request whose values cannot be served:
// 400, as OpenAI and llama-server answer (neither uses 422).
func errInvalid(msg string) *apiError {
	return newAPIError(http.StatusBadRequest, "invalid_request_error", msg)
}

func errNotSupported(msg string) *apiError {
	return newAPIError(http.StatusNotImplemented, "not_supported_error", msg)
}

func errContext(msg string) *apiError {
	return newAPIError(http.StatusBadRequest, "exceed_context_size_error", msg)
}

func errServer(msg string) *apiError {
	return newAPIError(http.StatusInternalServerError, "server_error", msg)
}

func errUnavailable(msg string) *apiError {
	return newAPIError(http.StatusServiceUnavailable, "unavailable_error", msg)
}

// internalError is a failure inside the server or its backend. Its text
// can name files, offsets, shared-memory regions and plugin sockets, so it
// goes to the log only; the client learns what failed and the request id.
type internalError struct {
	what string // "generation", "detokenize": what the client asked for
	err  error
}

func (e *internalError) Error() string { return e.what + " failed: " + e.err.Error() }
func (e *internalError) Unwrap() error { return e.err }

// PublicReason is implemented by backend errors that can say in general
// terms, without paths or other internals, what failed ("the staging
// backend failed"); the client then sees that instead of "internal error".
type PublicReason interface {
	PublicReason() string
}

// publicError logs err in full under the request's id and returns what the
// client may see of it.
func (s *Server) publicError(c echo.Context, err error) *apiError {
	id := requestIDOf(c)
	what, why := "the request", "internal error"
	var ie *internalError
	if errors.As(err, &ie) {
		what = ie.what
	}
	var pr PublicReason
	if errors.As(err, &pr) && pr.PublicReason() != "" {
		why = pr.PublicReason()
	}
	s.log.Error("request failed", "request_id", id, "method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
	ae := errServer(fmt.Sprintf("%s failed: %s; see the server log, request id %s", what, why, id))
	ae.RequestID = id
	return ae
}

// handleError is Echo's error handler: every error leaves as JSON in
// OpenAI's shape, whichever layer produced it.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var ae *apiError
	var he *echo.HTTPError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &he):
		ae = httpErrorToAPI(he)
	default:
		ae = s.publicError(c, err)
	}
	out := *ae // a copy: an apiError may be shared
	ae = &out
	ae.RequestID = requestIDOf(c)
	if ae.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", itoa(ae.RetryAfter))
	}
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(ae.Status)
		return
	}
	if isAnthropicPath(c.Request().URL.Path) {
		_ = c.JSON(anthropicError(ae))
		return
	}
	_ = c.JSON(ae.Status, map[string]*apiError{"error": ae})
}

func httpErrorToAPI(he *echo.HTTPError) *apiError {
	msg := http.StatusText(he.Code)
	if m, ok := he.Message.(string); ok && m != "" {
		msg = m
	}
	typ := "server_error"
	switch he.Code {
	case http.StatusNotFound:
		typ = "not_found_error"
		msg = "route not found"
	case http.StatusMethodNotAllowed:
		typ = "invalid_request_error"
		msg = "method not allowed on this route"
	case http.StatusUnauthorized:
		typ = "authentication_error"
	case http.StatusRequestEntityTooLarge:
		typ = "invalid_request_error"
	default:
		if he.Code >= 400 && he.Code < 500 {
			typ = "invalid_request_error"
		}
	}
	return newAPIError(he.Code, typ, msg)
}
