package kernelsavx2

import (
	"os"
	"regexp"
	"testing"
)

// TestAsmVEXOnly guards the AVX2 promise: a vector register numbered 16 or
// above only exists in EVEX (AVX-512) encodings, which would fault on an
// AVX2-only CPU, so the generator must never allocate one here.
func TestAsmVEXOnly(t *testing.T) {
	src, err := os.ReadFile("kernels_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	evex := regexp.MustCompile(`\b[XYZ](1[6-9]|2[0-9]|3[01])\b|\bZ[0-9]+\b|\bK[1-7]\b`)
	if loc := evex.FindIndex(src); loc != nil {
		t.Fatalf("kernels_amd64.s uses an AVX-512 register: %q", src[max(0, loc[0]-40):loc[1]])
	}
}
