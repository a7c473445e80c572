// Package engine owns a model's sequence (core/state holds its memory),
// prefill and decode scheduling, and prefix reuse through the sequence's
// snapshots.
package engine
