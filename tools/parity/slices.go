package parity

import "fmt"

// makeSlice returns a []T of length n for GGUF element type t.
func makeSlice(t uint32, n int) (any, error) {
	switch t {
	case TypeUint8:
		return make([]uint8, n), nil
	case TypeInt8:
		return make([]int8, n), nil
	case TypeUint16:
		return make([]uint16, n), nil
	case TypeInt16:
		return make([]int16, n), nil
	case TypeUint32:
		return make([]uint32, n), nil
	case TypeInt32:
		return make([]int32, n), nil
	case TypeFloat32:
		return make([]float32, n), nil
	case TypeBool:
		return make([]bool, n), nil
	case TypeString:
		return make([]string, n), nil
	case TypeUint64:
		return make([]uint64, n), nil
	case TypeInt64:
		return make([]int64, n), nil
	case TypeFloat64:
		return make([]float64, n), nil
	}
	return nil, fmt.Errorf("unsupported GGUF array element type %d", t)
}

// setElem stores v (of the slice's element type) at s[i].
func setElem(s any, i int, v any) {
	switch s := s.(type) {
	case []uint8:
		s[i] = v.(uint8)
	case []int8:
		s[i] = v.(int8)
	case []uint16:
		s[i] = v.(uint16)
	case []int16:
		s[i] = v.(int16)
	case []uint32:
		s[i] = v.(uint32)
	case []int32:
		s[i] = v.(int32)
	case []float32:
		s[i] = v.(float32)
	case []bool:
		s[i] = v.(bool)
	case []string:
		s[i] = v.(string)
	case []uint64:
		s[i] = v.(uint64)
	case []int64:
		s[i] = v.(int64)
	case []float64:
		s[i] = v.(float64)
	}
}
