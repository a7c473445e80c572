//go:build !noasm

package kernelsavx512

import (
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit/kerneltest"
)

func TestPrepQ8K(t *testing.T) {
	if !cpu.avx512 {
		t.Skip("CPU lacks the instruction set")
	}
	kerneltest.PrepQ8K(t, q63PrepQ8KVNNI256)
}

func TestPrepQ45(t *testing.T) {
	if !cpu.avx512 {
		t.Skip("CPU lacks the instruction set")
	}
	kerneltest.PrepQ45(t, q4mmPrepQ8KVNNI256)
}
