package tokenizer

import (
	"fmt"

	"github.com/k3-inference/k3/core/gguf"
)

// ConfigFromGGUF reads the tokenizer.ggml.* metadata of a GGUF file. Arrays
// must have the element types llama.cpp insists on (strings for tokens and
// merges, int32 for token types); scalar ids and flags may be any integer
// or bool type.
func ConfigFromGGUF(f *gguf.File) (Config, error) {
	c := Config{
		Model: f.String("tokenizer.ggml.model", ""),
		Pre:   f.String("tokenizer.ggml.pre", ""),
	}
	var err error
	if c.Tokens, err = stringArray(f, "tokenizer.ggml.tokens", true); err != nil {
		return c, err
	}
	if c.Merges, err = stringArray(f, "tokenizer.ggml.merges", false); err != nil {
		return c, err
	}
	if v, ok := f.Lookup("tokenizer.ggml.token_type"); ok {
		types, isI32 := v.V.([]int32)
		if v.Type != gguf.TypeArray || v.Elem != gguf.TypeInt32 || !isI32 {
			return c, fmt.Errorf("tokenizer: %s: tokenizer.ggml.token_type is %s, want an int32 array", f.Path(), v.Type)
		}
		c.Types = make([]TokenType, len(types))
		for i, t := range types {
			c.Types[i] = TokenType(t)
		}
	}
	c.IDs = map[string]uint32{}
	for _, k := range IDKeys {
		key := "tokenizer.ggml." + k
		if f.Has(key) {
			if id := f.Uint(key, 1<<32); id < 1<<32 {
				c.IDs[k] = uint32(id)
			}
		}
	}
	c.Flags = map[string]bool{}
	for _, k := range FlagKeys {
		key := "tokenizer.ggml." + k
		if f.Has(key) {
			c.Flags[k] = f.Bool(key, false)
		}
	}
	if err := f.Err(); err != nil {
		return c, fmt.Errorf("tokenizer: %w", err)
	}
	if c.Model == "" {
		return c, fmt.Errorf("tokenizer: %s: tokenizer.ggml.model is missing", f.Path())
	}
	return c, nil
}

func stringArray(f *gguf.File, key string, required bool) ([]string, error) {
	v, ok := f.Lookup(key)
	if !ok {
		if required {
			return nil, fmt.Errorf("tokenizer: %s: %s is missing", f.Path(), key)
		}
		return nil, nil
	}
	s, isStrs := v.V.([]string)
	if v.Type != gguf.TypeArray || v.Elem != gguf.TypeString || !isStrs {
		return nil, fmt.Errorf("tokenizer: %s: %s is %s, want a string array", f.Path(), key, v.Type)
	}
	return s, nil
}

// FromGGUF builds the tokenizer of a GGUF file.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	c, err := ConfigFromGGUF(f)
	if err != nil {
		return nil, err
	}
	t, err := New(c)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, f.Path())
	}
	return t, nil
}

// GGUFKVs returns the tokenizer metadata of c as GGUF key-values, for
// writing vocabulary files (tests, synthetic models).
func GGUFKVs(c Config) []gguf.KV {
	kvs := []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.Str(c.Model)},
		{Key: "tokenizer.ggml.pre", Value: gguf.Str(c.Pre)},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Strs(c.Tokens)},
	}
	if c.Types != nil {
		types := make([]int32, len(c.Types))
		for i, t := range c.Types {
			types[i] = int32(t)
		}
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.token_type", Value: gguf.I32s(types)})
	}
	if c.Merges != nil {
		kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml.merges", Value: gguf.Strs(c.Merges)})
	}
	for _, k := range IDKeys {
		if id, ok := c.IDs[k]; ok {
			kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml." + k, Value: gguf.U32(id)})
		}
	}
	for _, k := range FlagKeys {
		if b, ok := c.Flags[k]; ok {
			kvs = append(kvs, gguf.KV{Key: "tokenizer.ggml." + k, Value: gguf.Bool(b)})
		}
	}
	return kvs
}
