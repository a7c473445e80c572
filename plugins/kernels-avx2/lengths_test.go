package kernelsavx2

import (
	"testing"

	"github.com/k3-inference/k3/plugins/internal/kernelkit/kerneltest"
)

func TestRowLengths(t *testing.T) { kerneltest.RowLengths(t, kit) }
