package gguf

import (
	"errors"
	"fmt"
)

// The typed accessors below take a short key ("block_count") that gets the
// architecture prefix, or a full key in the general., tokenizer. or split.
// namespaces. A missing key yields the default. A key of the wrong type
// also yields the default and is remembered: check Err after reading a
// model's hyperparameters, so a malformed file is reported, not guessed at.

// Uint returns an integer key of any width as uint64.
func (f *File) Uint(key string, def uint64) uint64 {
	return get(f, key, def, Value.AsUint)
}

// Int returns an integer key of any width as int64.
func (f *File) Int(key string, def int64) int64 {
	return get(f, key, def, Value.AsInt)
}

// Float returns a float (or integer) key as float64.
func (f *File) Float(key string, def float64) float64 {
	return get(f, key, def, Value.AsFloat)
}

// Bool returns a bool key.
func (f *File) Bool(key string, def bool) bool {
	return get(f, key, def, Value.AsBool)
}

// String returns a string key.
func (f *File) String(key string, def string) string {
	return get(f, key, def, Value.AsString)
}

// Strings returns an array of strings, or nil when the key is missing. The
// slice is shared with the File; do not modify it.
func (f *File) Strings(key string) []string {
	return get(f, key, nil, Value.AsStrings)
}

// Ints returns an integer array, or an integer scalar as a one-element
// slice (llama.cpp accepts either for per-layer values such as
// attention.head_count_kv), or nil when the key is missing.
func (f *File) Ints(key string) []int64 {
	return get(f, key, nil, Value.AsInts)
}

// Floats returns a numeric array, or a numeric scalar as a one-element
// slice, or nil when the key is missing.
func (f *File) Floats(key string) []float64 {
	return get(f, key, nil, Value.AsFloats)
}

// Has reports whether a (short or full) key is present.
func (f *File) Has(key string) bool {
	_, ok := f.Lookup(f.key(key))
	return ok
}

// Err returns the type errors met by the typed accessors so far, or nil.
func (f *File) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

func get[T any](f *File, key string, def T, as func(Value) (T, error)) T {
	full := f.key(key)
	v, ok := f.Lookup(full)
	if !ok {
		return def
	}
	x, err := as(v)
	if err != nil {
		f.mu.Lock()
		f.errs = append(f.errs, fmt.Errorf("gguf: %s: key %q: %w", f.path, full, err))
		f.mu.Unlock()
		return def
	}
	return x
}
