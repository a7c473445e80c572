package parity

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/k3-inference/k3/core/quant"
)

// GGUF value types, numbered as in the file format (gguf.h's enum gguf_type).
const (
	TypeUint8   uint32 = 0
	TypeInt8    uint32 = 1
	TypeUint16  uint32 = 2
	TypeInt16   uint32 = 3
	TypeUint32  uint32 = 4
	TypeInt32   uint32 = 5
	TypeFloat32 uint32 = 6
	TypeBool    uint32 = 7
	TypeString  uint32 = 8
	TypeArray   uint32 = 9
	TypeUint64  uint32 = 10
	TypeInt64   uint32 = 11
	TypeFloat64 uint32 = 12
)

// Meta is a GGUF file's header as libggml-base's gguf_* reader sees it. For a
// split model it describes the one file named.
type Meta struct {
	Version    uint32
	Alignment  int64
	DataOffset int64 // start of the tensor data section
	KVs        []KV  // in file order
	Tensors    []TensorInfo
}

// KV is one metadata entry. V holds the Go type matching Type: uint8, int8,
// uint16, int16, uint32, int32, float32, bool, string, uint64, int64, float64,
// or for arrays a slice of the element type (Elem), e.g. []string or []int32.
// Strings hold the exact bytes from the file. Elem is 0 for non-arrays.
type KV struct {
	Key  string
	Type uint32
	Elem uint32
	V    any
}

// TensorInfo is one tensor's entry. Ne has ggml's 4 dimensions (1 past the
// tensor's own); Shape is Ne without trailing 1s, as ggml_n_dims counts them
// (the file's n_dims itself is not kept by gguf_*).
type TensorInfo struct {
	Name   string
	Type   quant.Type
	Ne     [4]int64
	Shape  []int64
	Offset int64 // absolute offset in the file
	Size   int64 // bytes
}

// Lookup returns the KV with the given key.
func (m *Meta) Lookup(key string) (KV, bool) {
	for _, kv := range m.KVs {
		if kv.Key == key {
			return kv, true
		}
	}
	return KV{}, false
}

// Tensor returns the tensor with the given name.
func (m *Meta) Tensor(name string) (TensorInfo, bool) {
	for _, t := range m.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// Meta reads every KV and tensor info of a GGUF file with gguf_init_from_file.
// A file gguf_* refuses gives a *LoadError.
func (r *Ref) Meta(model string) (*Meta, error) {
	out, err := r.run(nil, "meta", model)
	if err != nil {
		return nil, asLoadError(err, model)
	}
	var raw struct {
		Version    uint32 `json:"version"`
		Alignment  int64  `json:"alignment"`
		DataOffset int64  `json:"data_offset"`
		KVs        []struct {
			Key  json.RawMessage `json:"key"`
			Type uint32          `json:"type"`
			Elem uint32          `json:"elem"`
			V    json.RawMessage `json:"value"`
		} `json:"kvs"`
		Tensors []struct {
			Name   json.RawMessage `json:"name"`
			Type   quant.Type      `json:"type"`
			Ne     [4]int64        `json:"ne"`
			Offset int64           `json:"offset"`
			Size   int64           `json:"size"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, fmt.Errorf("parity: meta %s: decoding k3ref output: %w", model, err)
	}
	m := &Meta{Version: raw.Version, Alignment: raw.Alignment, DataOffset: raw.DataOffset}
	for _, kv := range raw.KVs {
		key, err := decodeString(kv.Key)
		if err != nil {
			return nil, fmt.Errorf("parity: meta %s: key: %w", model, err)
		}
		v, err := decodeValue(kv.Type, kv.Elem, kv.V)
		if err != nil {
			return nil, fmt.Errorf("parity: meta %s: key %q: %w", model, key, err)
		}
		m.KVs = append(m.KVs, KV{Key: key, Type: kv.Type, Elem: kv.Elem, V: v})
	}
	for _, t := range raw.Tensors {
		name, err := decodeString(t.Name)
		if err != nil {
			return nil, fmt.Errorf("parity: meta %s: tensor name: %w", model, err)
		}
		ti := TensorInfo{Name: name, Type: t.Type, Ne: t.Ne, Offset: t.Offset, Size: t.Size}
		n := 4
		for n > 1 && t.Ne[n-1] == 1 {
			n--
		}
		ti.Shape = append([]int64(nil), t.Ne[:n]...)
		m.Tensors = append(m.Tensors, ti)
	}
	return m, nil
}

func asLoadError(err error, model string) error {
	var e *Error
	if errors.As(err, &e) && e.Exit == exitRejected {
		return &LoadError{Model: model, Msg: e.Stderr}
	}
	return err
}

// decodeString reads k3ref's string encoding: a JSON string, or {"hex": ...}
// for bytes that are not valid UTF-8.
func decodeString(b json.RawMessage) (string, error) {
	if len(b) > 0 && b[0] == '{' {
		var h struct {
			Hex string `json:"hex"`
		}
		if err := json.Unmarshal(b, &h); err != nil {
			return "", err
		}
		s, err := hex.DecodeString(h.Hex)
		return string(s), err
	}
	var s string
	err := json.Unmarshal(b, &s)
	return s, err
}

func decodeFloat(b json.RawMessage, bits int) (float64, error) {
	switch string(b) {
	case `"nan"`:
		return math.NaN(), nil
	case `"inf"`:
		return math.Inf(1), nil
	case `"-inf"`:
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(string(b), bits)
}

// decodeScalar converts one JSON value of GGUF type t to its Go type.
func decodeScalar(t uint32, b json.RawMessage) (any, error) {
	s := string(b)
	switch t {
	case TypeUint8:
		v, err := strconv.ParseUint(s, 10, 8)
		return uint8(v), err
	case TypeInt8:
		v, err := strconv.ParseInt(s, 10, 8)
		return int8(v), err
	case TypeUint16:
		v, err := strconv.ParseUint(s, 10, 16)
		return uint16(v), err
	case TypeInt16:
		v, err := strconv.ParseInt(s, 10, 16)
		return int16(v), err
	case TypeUint32:
		v, err := strconv.ParseUint(s, 10, 32)
		return uint32(v), err
	case TypeInt32:
		v, err := strconv.ParseInt(s, 10, 32)
		return int32(v), err
	case TypeUint64:
		return strconv.ParseUint(s, 10, 64)
	case TypeInt64:
		return strconv.ParseInt(s, 10, 64)
	case TypeFloat32:
		v, err := decodeFloat(b, 32)
		return float32(v), err
	case TypeFloat64:
		return decodeFloat(b, 64)
	case TypeBool:
		if s != "true" && s != "false" {
			return nil, fmt.Errorf("bad bool %s", s)
		}
		return s == "true", nil
	case TypeString:
		return decodeString(b)
	}
	return nil, fmt.Errorf("unknown GGUF type %d", t)
}

// decodeValue converts a KV's JSON value, building typed slices for arrays.
func decodeValue(t, elem uint32, b json.RawMessage) (any, error) {
	if t != TypeArray {
		return decodeScalar(t, b)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return nil, err
	}
	out, err := makeSlice(elem, len(items))
	if err != nil {
		return nil, err
	}
	for i, it := range items {
		v, err := decodeScalar(elem, bytes.TrimSpace(it))
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		setElem(out, i, v)
	}
	return out, nil
}
