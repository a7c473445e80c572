package server

import "github.com/k3-inference/k3/core/chat"

// blockKind is a kind of part a chat reply is made of. The Responses API
// (output items) and the Messages API (content blocks) both stream a reply
// as a sequence of such parts, each opened, grown and closed.
type blockKind int

const (
	blockReasoning blockKind = iota
	blockText
	blockTool
)

// blockSink receives a reply as blocks. open gets the tool call's first
// delta (its ID and name) for a tool block; delta gets text or, for a tool
// block, a fragment of the arguments JSON.
type blockSink interface {
	open(kind blockKind, call *chat.ToolCallDelta) error
	delta(kind blockKind, text string) error
	close(kind blockKind) error
}

// blocks turns the reply parser's deltas into blocks for a sink: a new
// block starts whenever the kind or the tool call changes.
type blocks struct {
	sink   blockSink
	isOpen bool
	kind   blockKind
	call   int // the open tool block's call index
}

func (b *blocks) feed(ds []chat.Delta) error {
	for _, d := range ds {
		var kind blockKind
		var text string
		switch {
		case d.ToolCall != nil:
			kind, text = blockTool, d.ToolCall.Arguments
		case d.Reasoning != "":
			kind, text = blockReasoning, d.Reasoning
		case d.Content != "":
			kind, text = blockText, d.Content
		default:
			continue
		}
		if !b.isOpen || b.kind != kind || (kind == blockTool && d.ToolCall.Index != b.call) {
			if err := b.finish(); err != nil {
				return err
			}
			if err := b.sink.open(kind, d.ToolCall); err != nil {
				return err
			}
			b.isOpen, b.kind = true, kind
			if d.ToolCall != nil {
				b.call = d.ToolCall.Index
			}
		}
		if text != "" {
			if err := b.sink.delta(kind, text); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish closes the open block, if any.
func (b *blocks) finish() error {
	if !b.isOpen {
		return nil
	}
	b.isOpen = false
	return b.sink.close(b.kind)
}
