package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/config"
	"github.com/k3-inference/k3/core/engine"
	"github.com/k3-inference/k3/core/gguf"
	"github.com/k3-inference/k3/core/runtime"
	"github.com/k3-inference/k3/core/sample"
)

func init() {
	register(&command{
		name:    "run",
		summary: "generate text from a prompt, or chat interactively (--chat)",
		run:     runRun,
	})
}

// runStdin is where --chat reads the user's lines (tests replace it).
var runStdin io.Reader = os.Stdin

// stringsFlag collects a repeatable flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

// runOptions are k3 run's settings after flag parsing.
type runOptions struct {
	path, prompt string
	maxTokens    int
	sampling     sample.Config
	stops        []string
	chat, raw    bool
	noThink      bool
	mapped       bool // weights on a plain mapping of the file, not the profile's stager
}

func runRun(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", stderr)
	var o runOptions
	fs.StringVar(&o.path, "m", "", "model file (first shard of a split model)")
	fs.StringVar(&o.path, "model", "", "same as -m")
	fs.StringVar(&o.prompt, "p", "", "prompt (wrapped in the chat template as a user message unless --raw)")
	fs.StringVar(&o.prompt, "prompt", "", "same as -p")
	fs.IntVar(&o.maxTokens, "n", 512, "most tokens to generate per reply (-1: until end of generation or a full context)")
	fs.IntVar(&o.maxTokens, "n-predict", 512, "same as -n")
	temp := fs.Float64("temp", 0.8, "temperature (0: greedy)")
	topK := fs.Int("top-k", 40, "keep the K most likely tokens (0: all)")
	topP := fs.Float64("top-p", 0.95, "keep the most likely tokens up to probability P (1: all)")
	minP := fs.Float64("min-p", 0.05, "drop tokens less likely than P times the most likely (0: off)")
	seed := fs.Int64("seed", -1, "sampling seed (-1: random)")
	repeat := fs.Float64("repeat-penalty", 1, "penalise tokens seen in the last --repeat-last-n (1: off)")
	repeatN := fs.Int("repeat-last-n", 64, "window of the penalties (-1: everything)")
	presence := fs.Float64("presence-penalty", 0, "subtracted once from tokens seen in the window")
	frequency := fs.Float64("frequency-penalty", 0, "subtracted per occurrence in the window")
	var stops stringsFlag
	fs.Var(&stops, "stop", "stop string (repeatable); never printed")
	fs.BoolVar(&o.chat, "chat", false, "interactive chat in the terminal")
	fs.BoolVar(&o.raw, "raw", false, "feed -p to the model as is, without the chat template")
	fs.BoolVar(&o.mapped, "mapped", false, "map the model file instead of staging it through the profile's stager")
	fs.BoolVar(&o.noThink, "no-think", false, "ask the chat template to skip the reasoning section")
	profile := fs.String("profile", "auto", "hardware profile: a YAML file or auto")
	threads := fs.Int("t", 0, "compute threads (0: from the profile)")
	fs.IntVar(threads, "threads", 0, "same as -t")
	ctxLen := fs.Int("c", 0, "context size in tokens (0: from the profile)")
	fs.IntVar(ctxLen, "ctx-size", 0, "same as -c")
	ubatch := fs.Int("ub", 0, "prompt tokens per forward call (0: from the profile)")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	o.stops = stops
	switch {
	case o.path == "":
		fmt.Fprintln(stderr, "k3 run: -m is required")
		return errUsage
	case o.chat && o.prompt != "":
		fmt.Fprintln(stderr, "k3 run: -p and --chat exclude each other")
		return errUsage
	case !o.chat && o.prompt == "":
		fmt.Fprintln(stderr, "k3 run: -p is required (or --chat)")
		return errUsage
	case o.chat && o.raw:
		fmt.Fprintln(stderr, "k3 run: --chat always applies the chat template; --raw is for -p")
		return errUsage
	}
	if *seed < 0 {
		*seed = int64(rand.Uint32())
	}
	o.sampling = sample.Config{Temperature: float32(*temp), TopK: *topK, TopP: float32(*topP), MinP: float32(*minP),
		RepeatPenalty: float32(*repeat), PenaltyLastN: *repeatN, PresencePenalty: float32(*presence),
		FrequencyPenalty: float32(*frequency), Seed: uint64(*seed)}

	set := map[string]any{}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "t", "threads":
			set["threads"] = *threads
		case "c", "ctx-size":
			set["context"] = *ctxLen
		case "ub":
			set["ubatch"] = *ubatch
		}
	})
	prof, err := config.Load(config.Options{Profile: *profile, ModelPath: o.path, Flags: set})
	if err != nil {
		return err
	}
	s, err := openSession(o, prof, stdout, stderr)
	if err != nil {
		return err
	}
	defer s.close()
	fmt.Fprintf(stderr, "k3: sampling temp=%g top-k=%d top-p=%g min-p=%g repeat-penalty=%g seed=%d\n",
		*temp, *topK, *topP, *minP, *repeat, *seed)
	if o.chat {
		return s.chatLoop(runStdin)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return s.once(ctx, o.prompt)
}

// session is k3 run's model and its output.
type session struct {
	o      runOptions
	f      *gguf.File
	rt     *runtime.Runtime // the model on the profile's stager and kernels
	eng    *engine.Engine
	tmpl   *chat.Template
	stdout io.Writer
	stderr io.Writer
	tty    bool // stdout is a terminal: reasoning is dimmed
}

func openSession(o runOptions, prof *config.Profile, stdout, stderr io.Writer) (*session, error) {
	f, err := gguf.OpenWith(o.path, runtime.OpenOptions(prof))
	if err != nil {
		return nil, err
	}
	s := &session{o: o, f: f, stdout: stdout, stderr: stderr, tty: isTerminal(stdout)}
	if !o.raw {
		src := f.String("tokenizer.chat_template", "")
		if src == "" {
			f.Close()
			return nil, fmt.Errorf("%s has no tokenizer.chat_template; use --raw to feed the prompt as is", o.path)
		}
		if s.tmpl, err = chat.New(src); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: tokenizer.chat_template: %w", o.path, err)
		}
	}
	s.rt, err = runtime.OpenFile(context.Background(), f, prof, runtimeOptions(runtime.Options{Mapped: o.mapped}, stderr))
	if err != nil {
		f.Close()
		return nil, err
	}
	fmt.Fprintln(stderr, s.rt.Mode)
	if s.eng, err = s.rt.Engine(engine.Options{}); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// close stops the runtime, then closes the file.
func (s *session) close() {
	if s.rt != nil {
		s.rt.Close()
	}
	s.f.Close()
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// once generates one reply to -p and prints the speed line.
func (s *session) once(ctx context.Context, prompt string) error {
	req := s.request()
	var out func(engine.Piece) error
	var rp *replyPrinter
	if s.o.raw {
		req.Text = prompt
		out = func(p engine.Piece) error {
			_, err := io.WriteString(s.stdout, p.Text)
			return err
		}
	} else {
		in := s.chatInput([]chat.Message{{Role: "user", Content: prompt}})
		var err error
		if req.Text, err = s.tmpl.Render(in); err != nil {
			return err
		}
		if rp, err = s.newReplyPrinter(in); err != nil {
			return err
		}
		req.Special = true
		out = rp.piece
	}
	res, err := s.eng.Generate(ctx, req, out)
	if rp != nil {
		rp.close()
	}
	fmt.Fprintln(s.stdout)
	s.speedLine(res, err)
	if errors.Is(err, context.Canceled) {
		return nil // Ctrl-C: what was generated is shown
	}
	return err
}

func (s *session) request() engine.Request {
	return engine.Request{Sampling: s.o.sampling, MaxTokens: max(s.o.maxTokens, 0), Stop: s.o.stops}
}

func (s *session) chatInput(msgs []chat.Message) chat.Input {
	tok := s.eng.Tokenizer()
	in := chat.Input{Messages: msgs, AddGenerationPrompt: true, BOSToken: tok.Token(tok.BOS()), EOSToken: tok.Token(tok.EOS())}
	if s.o.noThink {
		off := false
		in.EnableThinking = &off
		in.Kwargs = map[string]json.RawMessage{"thinking": json.RawMessage("false")}
	}
	return in
}

// speedLine reports a generation on stderr.
func (s *session) speedLine(r engine.Result, err error) {
	finish := string(r.Finish)
	switch {
	case errors.Is(err, context.Canceled):
		finish = "interrupted"
	case err != nil:
		finish = "error"
	}
	fmt.Fprintf(s.stderr, "k3: prefill %d tokens (%d reused) in %.2fs, %.1f tok/s | decode %d tokens in %.2fs, %.1f tok/s | finish=%s\n",
		r.PrefillTokens, r.ReusedTokens, r.PrefillTime.Seconds(), r.PrefillTPS(),
		r.GeneratedTokens, r.DecodeTime.Seconds(), r.DecodeTPS(), finish)
}
