package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"

	"github.com/k3-inference/k3/core/chat"
	"github.com/k3-inference/k3/core/engine"
)

// chatLoop is k3 run --chat: read a line, reply, keep the conversation.
// The engine keeps the evaluated conversation, so each turn only
// evaluates what is new. Ctrl-C stops a reply; /exit or EOF ends.
func (s *session) chatLoop(in io.Reader) error {
	var mu sync.Mutex
	var cancel context.CancelFunc // of the reply in progress
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	go func() {
		for range sig {
			mu.Lock()
			if cancel != nil {
				cancel()
			} else {
				fmt.Fprint(s.stderr, "\n(/exit or Ctrl-D quits)\n> ")
			}
			mu.Unlock()
		}
	}()

	fmt.Fprintln(s.stderr, "k3: chat: type a message and press Enter; /clear starts over, /exit or Ctrl-D quits, Ctrl-C stops a reply")
	var msgs []chat.Message
	lines := bufio.NewReader(in)
	for {
		fmt.Fprint(s.stdout, "> ")
		line, err := lines.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		text := strings.TrimSpace(line)
		switch {
		case text == "/exit":
			return nil
		case text == "/clear":
			msgs = nil
			continue
		case text == "" && err != nil: // EOF
			fmt.Fprintln(s.stdout)
			return nil
		case text == "":
			continue
		}
		ctx, c := context.WithCancel(context.Background())
		mu.Lock()
		cancel = c
		mu.Unlock()
		reply, ok, rerr := s.turn(ctx, append(msgs, chat.Message{Role: "user", Content: text}))
		mu.Lock()
		cancel = nil
		mu.Unlock()
		c()
		if rerr != nil {
			fmt.Fprintln(s.stderr, "k3:", rerr)
		}
		if ok {
			msgs = append(msgs, chat.Message{Role: "user", Content: text}, reply)
		}
		if err != nil { // EOF after a last line without newline
			return nil
		}
	}
}

// turn replies to the conversation msgs (ending with the user's message)
// and returns the reply as an assistant message, and whether the turn
// counts: a reply interrupted after its first token counts as far as it
// got; one interrupted earlier, or failed, does not.
func (s *session) turn(ctx context.Context, msgs []chat.Message) (chat.Message, bool, error) {
	in := s.chatInput(msgs)
	prompt, err := s.tmpl.Render(in)
	if err != nil {
		return chat.Message{}, false, err
	}
	rp, err := s.newReplyPrinter(in)
	if err != nil {
		return chat.Message{}, false, err
	}
	req := s.request()
	req.Text, req.Special = prompt, true
	res, err := s.eng.Generate(ctx, req, rp.piece)
	rp.close()
	fmt.Fprintln(s.stdout)
	s.speedLine(res, err)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	if err != nil || res.GeneratedTokens == 0 {
		return chat.Message{}, false, err
	}
	r := rp.parser.Result()
	return chat.Message{Role: "assistant", Content: r.Content, ReasoningContent: r.Reasoning, ToolCalls: r.ToolCalls}, true, nil
}

// replyPrinter parses a streamed reply (reasoning, content, tool calls)
// and prints it: reasoning labelled, and dimmed on a terminal.
type replyPrinter struct {
	s       *session
	parser  *chat.Parser
	section string // what was printed last: "", "reasoning", "content", "tool"
	err     error
}

const (
	ansiDim   = "\x1b[2m"
	ansiReset = "\x1b[0m"
)

func (s *session) newReplyPrinter(in chat.Input) (*replyPrinter, error) {
	popts, err := s.tmpl.ParseOptions(in)
	if err != nil {
		return nil, err
	}
	return &replyPrinter{s: s, parser: chat.NewParser(popts)}, nil
}

func (rp *replyPrinter) piece(p engine.Piece) error {
	rp.print(rp.parser.Feed(p.Text))
	return rp.err
}

func (rp *replyPrinter) close() {
	rp.print(rp.parser.Close())
	rp.enter("")
}

func (rp *replyPrinter) print(ds []chat.Delta) {
	for _, d := range ds {
		switch {
		case d.Reasoning != "":
			rp.enter("reasoning")
			rp.write(d.Reasoning)
		case d.Content != "":
			rp.enter("content")
			rp.write(d.Content)
		case d.ToolCall != nil:
			if d.ToolCall.Name != "" {
				rp.enter("")
				rp.write(fmt.Sprintf("\n[tool call %d: %s] ", d.ToolCall.Index, d.ToolCall.Name))
			}
			rp.section = "tool"
			rp.write(d.ToolCall.Arguments)
		}
	}
}

// enter switches the printed section, closing the reasoning block ("" is
// the end of the reply).
func (rp *replyPrinter) enter(section string) {
	if section == rp.section {
		return
	}
	if rp.section == "reasoning" {
		switch {
		case rp.s.tty:
			rp.write(ansiReset)
		default:
			rp.write("\n[/reasoning]")
		}
		if section != "" {
			rp.write("\n\n")
		}
	}
	if section == "reasoning" {
		if rp.s.tty {
			rp.write(ansiDim + "[reasoning] ")
		} else {
			rp.write("[reasoning]\n")
		}
	}
	rp.section = section
}

func (rp *replyPrinter) write(s string) {
	if rp.err == nil {
		_, rp.err = io.WriteString(rp.s.stdout, s)
	}
}
