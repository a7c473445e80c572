// Package engine owns a model's sequences (slots; core/state holds their
// memory), prefill and decode scheduling (the slots' decode steps batched
// per step), and prefix reuse: each slot's own snapshots and the shared
// prefix cache in memory and on disk.
package engine
