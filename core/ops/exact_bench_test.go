package ops

import (
	"math/rand/v2"
	"testing"
)

// K3's absorbed MLA row (512 latent + 64 rope) over a short and a longer cache.
func BenchmarkAttendHalf(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{48, 400} {
		kv := HalfKV{Stride: 576, DK: 576, DV: 512}
		kv.Data = halfCache(r, n, kv.Stride, 1)
		q := randVec(r, kv.DK)
		out := make([]float32, kv.DV)
		b.Run("new/"+itoa(n), func(b *testing.B) {
			for b.Loop() {
				AttendHalf(q, kv, n, 0.04, out)
			}
		})
		b.Run("ref/"+itoa(n), func(b *testing.B) {
			for b.Loop() {
				attendHalfRef(q, kv, n, 0.04, out)
			}
		})
	}
}

func itoa(n int) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		if n /= 10; n == 0 {
			return s
		}
	}
}
