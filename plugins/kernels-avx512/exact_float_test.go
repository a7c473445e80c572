package kernelsavx512

import (
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit/kerneltest"
)

func TestDotFloatBoundary(t *testing.T) { kerneltest.DotFloatBoundary(t, kit) }
