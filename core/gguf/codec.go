package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/k3-inference/k3/core/quant"
)

var le = binary.LittleEndian

// decodeScalar decodes one value of fixed-size type t from p.
func decodeScalar(t ValueType, p []byte) any {
	switch t {
	case TypeUint8:
		return p[0]
	case TypeInt8:
		return int8(p[0])
	case TypeBool:
		// Any non-zero byte is true, as in ggml.
		return p[0] != 0
	case TypeUint16:
		return le.Uint16(p)
	case TypeInt16:
		return int16(le.Uint16(p))
	case TypeUint32:
		return le.Uint32(p)
	case TypeInt32:
		return int32(le.Uint32(p))
	case TypeFloat32:
		return math.Float32frombits(le.Uint32(p))
	case TypeUint64:
		return le.Uint64(p)
	case TypeInt64:
		return int64(le.Uint64(p))
	case TypeFloat64:
		return math.Float64frombits(le.Uint64(p))
	}
	panic(fmt.Sprintf("gguf: decodeScalar of %s", t)) // callers check size() first
}

// decodeArray decodes n values of fixed-size type t from p.
func decodeArray(t ValueType, p []byte, n int) any {
	switch t {
	case TypeUint8:
		return append([]uint8(nil), p[:n]...)
	case TypeInt8:
		return decodeN(p, n, 1, func(q []byte) int8 { return int8(q[0]) })
	case TypeBool:
		return decodeN(p, n, 1, func(q []byte) bool { return q[0] != 0 })
	case TypeUint16:
		return decodeN(p, n, 2, le.Uint16)
	case TypeInt16:
		return decodeN(p, n, 2, func(q []byte) int16 { return int16(le.Uint16(q)) })
	case TypeUint32:
		return decodeN(p, n, 4, le.Uint32)
	case TypeInt32:
		return decodeN(p, n, 4, func(q []byte) int32 { return int32(le.Uint32(q)) })
	case TypeFloat32:
		return decodeN(p, n, 4, func(q []byte) float32 { return math.Float32frombits(le.Uint32(q)) })
	case TypeUint64:
		return decodeN(p, n, 8, le.Uint64)
	case TypeInt64:
		return decodeN(p, n, 8, func(q []byte) int64 { return int64(le.Uint64(q)) })
	case TypeFloat64:
		return decodeN(p, n, 8, func(q []byte) float64 { return math.Float64frombits(le.Uint64(q)) })
	}
	panic(fmt.Sprintf("gguf: decodeArray of %s", t)) // callers check size() first
}

func decodeN[T any](p []byte, n, size int, dec func([]byte) T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = dec(p[i*size:])
	}
	return out
}

// appendValue appends the encoding of v (type tag included) to dst.
func appendValue(dst []byte, v Value) ([]byte, error) {
	if err := v.check(); err != nil {
		return nil, err
	}
	dst = le.AppendUint32(dst, uint32(v.Type))
	if v.Type != TypeArray {
		return appendScalar(dst, v.V), nil
	}
	dst = le.AppendUint32(dst, uint32(v.Elem))
	dst = le.AppendUint64(dst, uint64(v.Len()))
	eachElem(v, func(e Value) bool {
		dst = appendScalar(dst, e.V)
		return true
	})
	return dst, nil
}

func appendScalar(dst []byte, v any) []byte {
	switch x := v.(type) {
	case uint8:
		return append(dst, x)
	case int8:
		return append(dst, byte(x))
	case bool:
		if x {
			return append(dst, 1)
		}
		return append(dst, 0)
	case uint16:
		return le.AppendUint16(dst, x)
	case int16:
		return le.AppendUint16(dst, uint16(x))
	case uint32:
		return le.AppendUint32(dst, x)
	case int32:
		return le.AppendUint32(dst, uint32(x))
	case float32:
		return le.AppendUint32(dst, math.Float32bits(x))
	case uint64:
		return le.AppendUint64(dst, x)
	case int64:
		return le.AppendUint64(dst, uint64(x))
	case float64:
		return le.AppendUint64(dst, math.Float64bits(x))
	case string:
		return appendString(dst, x)
	}
	panic(fmt.Sprintf("gguf: appendScalar of %T", v)) // Value.check rules this out
}

func appendString(dst []byte, s string) []byte {
	dst = le.AppendUint64(dst, uint64(len(s)))
	return append(dst, s...)
}

func qtype(t uint32) quant.Type { return quant.Type(t) }

// tensorBytes returns the data size of a tensor, rejecting unknown types,
// rows that are not whole blocks and sizes that overflow int64.
func tensorBytes(t quant.Type, shape []int64) (int64, error) {
	if !t.Known() {
		return 0, fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	ne0, rows := int64(1), int64(1)
	for i, d := range shape {
		if i == 0 {
			ne0 = d
			continue
		}
		if rows > math.MaxInt64/d {
			return 0, fmt.Errorf("shape %v: element count overflows int64", shape)
		}
		rows *= d
	}
	if ne0 > math.MaxInt64/rows {
		return 0, fmt.Errorf("shape %v: element count overflows int64", shape)
	}
	row, err := quant.RowSize(t, ne0)
	if err != nil {
		return 0, fmt.Errorf("shape %v: row of %d elements: %w", shape, ne0, err)
	}
	if row > 0 && rows > math.MaxInt64/row {
		return 0, fmt.Errorf("shape %v of %s: byte size overflows int64", shape, t)
	}
	return row * rows, nil
}
