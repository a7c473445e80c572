package quant

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFloatKnownBytes(t *testing.T) {
	x := []float32{1, -2, 65504, 1e-8, 1.00390625, 3.0078125}
	tests := []struct {
		typ  Type
		want string
	}{
		{F32, "0000803f" + "000000c0" + "00e07f47" + "77cc2b32" + "0080803f" + "00804040"},
		// 1e-8 is below half the smallest fp16 subnormal.
		{F16, "003c" + "00c0" + "ff7b" + "0000" + "043c" + "0442"},
		// bf16 keeps 1e-8 (0x322bcc77 rounds to 0x322c); 1.00390625 = 0x3f808000 ties down.
		{BF16, "803f" + "00c0" + "8047" + "2c32" + "803f" + "4040"},
	}
	for _, tt := range tests {
		t.Run(tt.typ.String(), func(t *testing.T) {
			q := quantizeOrFatal(t, tt.typ, x)
			if got := fmt.Sprintf("%x", q); got != tt.want {
				t.Errorf("bytes = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestFloatVecDotAccumulatesInDouble uses sums whose float32 accumulation
// would cancel to 0: ggml's scalar dot keeps the running sum in double.
func TestFloatVecDotAccumulatesInDouble(t *testing.T) {
	tests := []struct {
		typ  Type
		w, a []float32
	}{
		{F32, []float32{1e8, 1, -1e8}, []float32{1, 1, 1}},
		{F16, []float32{65504, 1, -65504}, []float32{65504, 1, 65504}},
		{BF16, []float32{0x1p30, 1, -0x1p30}, []float32{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.typ.String(), func(t *testing.T) {
			w, a := quantizeOrFatal(t, tt.typ, tt.w), quantizeOrFatal(t, tt.typ, tt.a)
			got, err := VecDot(tt.typ, len(tt.w), w, a)
			if err != nil {
				t.Fatal(err)
			}
			if got != 1 {
				t.Errorf("VecDot = %g, want 1", got)
			}
			back := dequantizeOrFatal(t, tt.typ, w, len(tt.w))
			if diff := cmp.Diff(tt.w, back); diff != "" {
				t.Errorf("round trip (-in +out):\n%s", diff)
			}
		})
	}
}
