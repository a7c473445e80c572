package model

import "unsafe"

// f32View reinterprets little-endian float32 tensor bytes in place; GGUF
// aligns tensor data, so the view is aligned too.
func f32View(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
