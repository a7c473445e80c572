//go:build !noasm

package kernelsavx2

import (
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit/kerneltest"
)

func TestPrepQ8K(t *testing.T) {
	if !hasAVX2 {
		t.Skip("CPU lacks the instruction set")
	}
	kerneltest.PrepQ8K(t, q63PrepQ8KAVX2)
}

func TestPrepQ45(t *testing.T) {
	if !hasAVX2 {
		t.Skip("CPU lacks the instruction set")
	}
	kerneltest.PrepQ45(t, q4mmPrepQ8KAVX2)
}
