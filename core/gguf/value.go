package gguf

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ValueType is a GGUF metadata value type, numbered as in the file format.
type ValueType uint32

// The GGUF metadata value types (gguf.h's gguf_type).
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("gguf_type(%d)", uint32(t))
}

// size is the encoded size of one scalar of type t; 0 for strings, arrays
// and unknown types.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// Value is one metadata value. Type is the value's GGUF type; for arrays it
// is TypeArray and Elem is the element type. V holds the Go value: uint8,
// int8, uint16, int16, uint32, int32, float32, bool, string, uint64, int64
// or float64 for scalars, and a slice of one of those for arrays. GGUF
// allows arrays of arrays; llama.cpp does not, and neither does k3.
type Value struct {
	Type ValueType
	Elem ValueType
	V    any
}

// KV is one metadata key and its value.
type KV struct {
	Key   string
	Value Value
}

// Scalar constructors.
func U8(v uint8) Value    { return Value{Type: TypeUint8, V: v} }
func I8(v int8) Value     { return Value{Type: TypeInt8, V: v} }
func U16(v uint16) Value  { return Value{Type: TypeUint16, V: v} }
func I16(v int16) Value   { return Value{Type: TypeInt16, V: v} }
func U32(v uint32) Value  { return Value{Type: TypeUint32, V: v} }
func I32(v int32) Value   { return Value{Type: TypeInt32, V: v} }
func F32(v float32) Value { return Value{Type: TypeFloat32, V: v} }
func Bool(v bool) Value   { return Value{Type: TypeBool, V: v} }
func Str(v string) Value  { return Value{Type: TypeString, V: v} }
func U64(v uint64) Value  { return Value{Type: TypeUint64, V: v} }
func I64(v int64) Value   { return Value{Type: TypeInt64, V: v} }
func F64(v float64) Value { return Value{Type: TypeFloat64, V: v} }

// Array constructors.
func U8s(v []uint8) Value    { return arr(TypeUint8, v) }
func I8s(v []int8) Value     { return arr(TypeInt8, v) }
func U16s(v []uint16) Value  { return arr(TypeUint16, v) }
func I16s(v []int16) Value   { return arr(TypeInt16, v) }
func U32s(v []uint32) Value  { return arr(TypeUint32, v) }
func I32s(v []int32) Value   { return arr(TypeInt32, v) }
func F32s(v []float32) Value { return arr(TypeFloat32, v) }
func Bools(v []bool) Value   { return arr(TypeBool, v) }
func Strs(v []string) Value  { return arr(TypeString, v) }
func U64s(v []uint64) Value  { return arr(TypeUint64, v) }
func I64s(v []int64) Value   { return arr(TypeInt64, v) }
func F64s(v []float64) Value { return arr(TypeFloat64, v) }

func arr(elem ValueType, v any) Value { return Value{Type: TypeArray, Elem: elem, V: v} }

// Len is the number of elements of an array value, 1 for a scalar.
func (v Value) Len() int {
	switch x := v.V.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	case []bool:
		return len(x)
	case []string:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float64:
		return len(x)
	}
	return 1
}

// check reports whether V's Go type matches Type and Elem, so a Value built
// by hand cannot be written as something else than it claims.
func (v Value) check() error {
	want := v.Type
	if v.Type == TypeArray {
		want = v.Elem
	}
	var ok bool
	switch want {
	case TypeUint8:
		ok = isType[uint8](v)
	case TypeInt8:
		ok = isType[int8](v)
	case TypeUint16:
		ok = isType[uint16](v)
	case TypeInt16:
		ok = isType[int16](v)
	case TypeUint32:
		ok = isType[uint32](v)
	case TypeInt32:
		ok = isType[int32](v)
	case TypeFloat32:
		ok = isType[float32](v)
	case TypeBool:
		ok = isType[bool](v)
	case TypeString:
		ok = isType[string](v)
	case TypeUint64:
		ok = isType[uint64](v)
	case TypeInt64:
		ok = isType[int64](v)
	case TypeFloat64:
		ok = isType[float64](v)
	default:
		if v.Type == TypeArray {
			return fmt.Errorf("array element type %s is not supported", v.Elem)
		}
		return fmt.Errorf("value type %s is not supported", v.Type)
	}
	if !ok {
		return fmt.Errorf("value of type %s holds a Go %T", v.typeName(), v.V)
	}
	return nil
}

func isType[T any](v Value) bool {
	if v.Type == TypeArray {
		_, ok := v.V.([]T)
		return ok
	}
	_, ok := v.V.(T)
	return ok
}

func (v Value) typeName() string {
	if v.Type == TypeArray {
		return "[]" + v.Elem.String()
	}
	return v.Type.String()
}

// AsInt returns an integer scalar of any width as int64. Booleans and
// floats are not integers.
func (v Value) AsInt() (int64, error) {
	switch x := v.V.(type) {
	case uint8:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("u64 %d does not fit in int64", x)
		}
		return int64(x), nil
	}
	return 0, fmt.Errorf("want an integer, have %s", v.typeName())
}

// AsUint returns a non-negative integer scalar of any width as uint64.
func (v Value) AsUint() (uint64, error) {
	if x, ok := v.V.(uint64); ok {
		return x, nil
	}
	i, err := v.AsInt()
	if err != nil {
		return 0, err
	}
	if i < 0 {
		return 0, fmt.Errorf("want an unsigned integer, have %s %d", v.typeName(), i)
	}
	return uint64(i), nil
}

// AsFloat returns a float or integer scalar as float64.
func (v Value) AsFloat() (float64, error) {
	switch x := v.V.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	case uint64:
		return float64(x), nil
	}
	i, err := v.AsInt()
	if err != nil {
		return 0, fmt.Errorf("want a number, have %s", v.typeName())
	}
	return float64(i), nil
}

// AsBool returns a bool scalar.
func (v Value) AsBool() (bool, error) {
	if x, ok := v.V.(bool); ok {
		return x, nil
	}
	return false, fmt.Errorf("want a bool, have %s", v.typeName())
}

// AsString returns a string scalar.
func (v Value) AsString() (string, error) {
	if x, ok := v.V.(string); ok {
		return x, nil
	}
	return "", fmt.Errorf("want a string, have %s", v.typeName())
}

// AsStrings returns an array of strings (shared, not copied).
func (v Value) AsStrings() ([]string, error) {
	if x, ok := v.V.([]string); ok {
		return x, nil
	}
	return nil, fmt.Errorf("want an array of strings, have %s", v.typeName())
}

// AsInts returns an integer array, or an integer scalar as a one-element
// slice: llama.cpp lets per-layer hyperparameters be either.
func (v Value) AsInts() ([]int64, error) {
	if v.Type != TypeArray {
		i, err := v.AsInt()
		if err != nil {
			return nil, err
		}
		return []int64{i}, nil
	}
	out := make([]int64, 0, v.Len())
	var err error
	eachElem(v, func(e Value) bool {
		var i int64
		if i, err = e.AsInt(); err != nil {
			err = fmt.Errorf("array: %w", err)
			return false
		}
		out = append(out, i)
		return true
	})
	return out, err
}

// AsFloats returns a numeric array, or a numeric scalar as a one-element slice.
func (v Value) AsFloats() ([]float64, error) {
	if v.Type != TypeArray {
		f, err := v.AsFloat()
		if err != nil {
			return nil, err
		}
		return []float64{f}, nil
	}
	out := make([]float64, 0, v.Len())
	var err error
	eachElem(v, func(e Value) bool {
		var f float64
		if f, err = e.AsFloat(); err != nil {
			err = fmt.Errorf("array: %w", err)
			return false
		}
		out = append(out, f)
		return true
	})
	return out, err
}

// eachElem calls fn with each element of an array as a scalar Value until fn
// returns false.
func eachElem(v Value, fn func(Value) bool) {
	each := func(n int, at func(i int) any) {
		for i := 0; i < n; i++ {
			if !fn(Value{Type: v.Elem, V: at(i)}) {
				return
			}
		}
	}
	switch x := v.V.(type) {
	case []uint8:
		each(len(x), func(i int) any { return x[i] })
	case []int8:
		each(len(x), func(i int) any { return x[i] })
	case []uint16:
		each(len(x), func(i int) any { return x[i] })
	case []int16:
		each(len(x), func(i int) any { return x[i] })
	case []uint32:
		each(len(x), func(i int) any { return x[i] })
	case []int32:
		each(len(x), func(i int) any { return x[i] })
	case []float32:
		each(len(x), func(i int) any { return x[i] })
	case []bool:
		each(len(x), func(i int) any { return x[i] })
	case []string:
		each(len(x), func(i int) any { return x[i] })
	case []uint64:
		each(len(x), func(i int) any { return x[i] })
	case []int64:
		each(len(x), func(i int) any { return x[i] })
	case []float64:
		each(len(x), func(i int) any { return x[i] })
	}
}

// String formats v compactly: scalars as themselves (strings quoted), long
// arrays as their first few elements and a count.
func (v Value) String() string {
	if v.Type != TypeArray {
		if s, ok := v.V.(string); ok {
			return strconv.Quote(clip(s, 200))
		}
		return fmt.Sprint(v.V)
	}
	const show = 8
	n := v.Len()
	var b strings.Builder
	b.WriteByte('[')
	i := 0
	eachElem(v, func(e Value) bool {
		if i == show {
			return false
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(clip(e.String(), 40))
		i++
		return true
	})
	if n > show {
		fmt.Fprintf(&b, ", ... (%d %s)", n, v.Elem)
	}
	b.WriteByte(']')
	return b.String()
}
