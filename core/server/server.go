package server

import (
	"context"
	"errors"
	"fmt"
	"github.com/k3-inference/k3/core/grammar"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/k3-inference/k3/core/config"
)

// Options configure a Server. Zero values take the defaults noted.
type Options struct {
	// Host is an address or a path ending in .sock (a Unix socket);
	// default 127.0.0.1. Port 0 picks a free port (profiles default to 8080).
	Host string
	Port int
	// APIKey, when set, is required as "Authorization: Bearer KEY" on every
	// route but /health and the page's static files.
	APIKey string
	// Alias is the model id clients see; default the backend's ModelInfo.ID.
	Alias string
	// Aliases and Tags are listed with the model by /v1/models
	// (llama-server's --alias a,b and --tags); Aliases holds Alias too.
	Aliases, Tags []string
	// AllowedHosts are names, besides the bound address, localhost and
	// (bound to 0.0.0.0 or ::) the machine's host name, that a server
	// without an API key answers in the Host header; "*" allows any.
	AllowedHosts []string
	// MaxQueue is how many requests may wait for the engine behind the
	// running ones before new ones get 429; default 8.
	MaxQueue int
	// Parallel is how many requests run on the backend at once (its
	// slots, llama-server's -np); default 1.
	Parallel int
	// MaxBodyBytes bounds request bodies (413 past it); default 8 MiB.
	MaxBodyBytes int64
	// ReadTimeout bounds reading a request (headers and body); default 60s.
	ReadTimeout time.Duration
	// WriteTimeout bounds each write to a client: a client that stops
	// reading a stream for this long is dropped and its generation
	// cancelled; default 60s.
	WriteTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections; default 120s.
	IdleTimeout time.Duration
	Logger      *slog.Logger
	// RequestLog receives llama.cpp's three timing lines at the end of each
	// generation; default os.Stderr.
	RequestLog io.Writer

	// CORSOrigins are the origins whose pages may read the answers
	// (cors.go); none by default, "*" for any.
	CORSOrigins []string
	// NoSlots turns GET /slots off (llama-server's --no-slots): 501.
	NoSlots bool
	// NoPrefillAssistant renders a conversation that ends with an
	// assistant message as finished, with a new generation prompt, instead
	// of continuing that message (llama-server's --no-prefill-assistant).
	NoPrefillAssistant bool
	// Batch is llama-server's -b (logical batch, default DefaultBatch):
	// /infill fits the prefix and suffix into it, 3:1.
	Batch int
	// SPMInfill puts the suffix before the prefix in /infill prompts
	// (llama-server's --spm-infill).
	SPMInfill bool
	// Defaults are what a request gets for the sampling fields it leaves
	// out (llama-server's --temp, --seed, -n).
	Defaults RequestDefaults

	// ShutdownGrace is how long running requests may go on once Serve's
	// context is done before they are ended (see shutdown.go); default
	// 10s, negative: end them at once.
	ShutdownGrace time.Duration
}

// DefaultBatch is llama-server's default -b.
const DefaultBatch = 2048

// OptionsFromConfig takes the server settings of a profile.
func OptionsFromConfig(p config.Profile) Options {
	c := p.Server
	o := Options{Host: c.Host, Port: c.Port, APIKey: c.APIKey, Aliases: c.Aliases(), Tags: c.Tags, AllowedHosts: c.AllowedHosts, ShutdownGrace: c.ShutdownGrace, Parallel: c.Parallel,
		CORSOrigins: c.CORSOrigins, NoSlots: !c.Slots, NoPrefillAssistant: !c.PrefillAssistant, Batch: p.Batch, SPMInfill: c.SPMInfill, Defaults: RequestDefaults{Temperature: &c.Temperature, Seed: &c.Seed, NPredict: c.NPredict, EnableThinking: c.EnableThinking()}}
	if len(o.Aliases) > 0 {
		o.Alias = o.Aliases[0]
	}
	if c.ShutdownGrace == 0 {
		o.ShutdownGrace = -1 // a profile's 0 means none, not the default
	}
	return o
}

func (o *Options) defaults() {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = 8
	}
	if o.Parallel <= 0 {
		o.Parallel = 1
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 8 << 20
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 60 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 60 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 120 * time.Second
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.RequestLog == nil {
		o.RequestLog = os.Stderr
	}
}

// Server is k3's HTTP server. Create it with New; it answers 503 on model
// routes until SetBackend hands it a loaded model.
type Server struct {
	opts    Options
	log     *slog.Logger
	echo    *echo.Echo
	backend atomic.Pointer[backendBox]
	queue   *queue
	metrics *metrics
	history history
	hosts   hostPolicy
	started time.Time
	// respStore keeps stored Responses for previous_response_id.
	respStore responseStore

	// Shutdown (shutdown.go): stopping refuses new requests; graceOver is
	// done, by endGrace, when running generations must end.
	stopping  atomic.Bool
	graceOver context.Context
	endGrace  context.CancelFunc
	flight    *inflight
}

type backendBox struct {
	b Backend
	// texts is every token's text, made the first time a request needs
	// it (logprobs, grammars); vocab indexes them for grammars.
	textsOnce sync.Once
	texts     []string
	vocabOnce sync.Once
	vocab     *grammar.Vocab
}

// New builds a server. b may be nil while the model loads.
func New(o Options, b Backend) *Server {
	o.defaults()
	s := &Server{opts: o, log: o.Logger, queue: newQueue(o.MaxQueue, o.Parallel), metrics: &metrics{}, hosts: newHostPolicy(o), started: time.Now(), flight: newInflight()}
	s.graceOver, s.endGrace = context.WithCancel(context.Background())
	if b != nil {
		s.SetBackend(b)
	}
	s.echo = s.routes()
	return s
}

// SetBackend makes the server ready: /health turns 200.
func (s *Server) SetBackend(b Backend) { s.backend.Store(&backendBox{b: b}) }

// Handler is the server's HTTP handler (tests use it with httptest).
func (s *Server) Handler() http.Handler { return s.echo }

func (s *Server) ready() (Backend, *apiError) {
	if s.stopping.Load() {
		return nil, errShuttingDown()
	}
	if box := s.backend.Load(); box != nil {
		return box.b, nil
	}
	return nil, errUnavailable("Loading model")
}

func (s *Server) modelID(b Backend) string {
	if s.opts.Alias != "" {
		return s.opts.Alias
	}
	return b.ModelInfo().ID
}

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.requestID, s.recoverPanics, s.checkHost, s.cors, s.authenticate)

	get := func(path string, h echo.HandlerFunc) {
		e.GET(path, h)
		e.HEAD(path, h) // net/http drops the body
	}
	get("/health", s.health)
	get("/v1/health", s.health)
	for _, p := range []string{"/v1/models", "/models"} {
		get(p, s.models)
	}
	for _, p := range []string{"/v1/chat/completions", "/chat/completions"} {
		e.POST(p, s.chatCompletions, requireJSON)
	}
	for _, p := range []string{"/v1/completions", "/completions"} {
		e.POST(p, s.completions, requireJSON)
	}
	s.agentRoutes(e)
	e.POST("/tokenize", s.tokenize, requireJSON)
	e.POST("/detokenize", s.detokenize, requireJSON)
	get("/metrics", s.serveMetrics)
	get("/status", s.status)
	get("/status/history", s.serveHistory)
	s.llamaRoutes(e, get)
	s.webRoutes(get)
	return e
}

// readBody reads at most MaxBodyBytes of the request body.
// readJSON reads the request body within the size limit and decodes it
// strictly into dst.
func (s *Server) readJSON(c echo.Context, dst any) *apiError {
	body, aerr := s.readBody(c)
	if aerr != nil {
		return aerr
	}
	return decodeJSON(body, dst)
}

func (s *Server) readBody(c echo.Context) ([]byte, *apiError) {
	r := http.MaxBytesReader(c.Response(), c.Request().Body, s.opts.MaxBodyBytes)
	b, err := io.ReadAll(r)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, newAPIError(http.StatusRequestEntityTooLarge, "invalid_request_error",
				fmt.Sprintf("request body exceeds %d bytes", s.opts.MaxBodyBytes))
		}
		return nil, errBadRequest("reading request body: " + err.Error())
	}
	// ReadTimeout is meant for the request only, not for the generation
	// that follows it.
	_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Time{})
	return b, nil
}

// Listen opens the listener the options name: a Unix socket when Host ends
// in .sock (a stale socket file is replaced), else TCP.
func (s *Server) Listen() (net.Listener, error) {
	if strings.HasSuffix(s.opts.Host, ".sock") {
		if fi, err := os.Stat(s.opts.Host); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(s.opts.Host)
		}
		ln, err := net.Listen("unix", s.opts.Host)
		if err != nil {
			return nil, fmt.Errorf("server: listen on unix socket %s: %w", s.opts.Host, err)
		}
		return ln, nil
	}
	addr := net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
	if s.opts.APIKey == "" && !isLoopback(s.opts.Host) {
		s.log.Warn("binding a non-loopback address without --api-key: anyone who can reach it can use the model", "addr", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("server: listen on %s: %w", addr, err)
	}
	return ln, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve answers requests on ln until ctx is done, then shuts down
// gracefully (shutdown.go): once it returns, no request runs and none will
// call the backend again. It serves once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.flight.track(s.echo),
		ConnState:         s.flight.connState,
		ReadHeaderTimeout: s.opts.ReadTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	hctx, stopHistory := context.WithCancel(ctx)
	defer stopHistory()
	go s.recordHistory(hctx, historyInterval)
	s.log.Info("server listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		s.shutdown(hs, ln) // the listener failed: drain what runs all the same
		return err
	case <-ctx.Done():
	}
	s.shutdown(hs, ln)
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }
