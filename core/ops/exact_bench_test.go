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

// One decode step of a K3 KDA layer (96 heads of 128) on one thread.
func BenchmarkDeltaRule(b *testing.B) {
	r := rand.New(rand.NewPCG(17, 18))
	const h, s = 96, 128
	state := randVec(r, h*s*s)
	for i := range state {
		state[i] *= 0.01
	}
	q, k, v, g := randVec(r, h*s), randVec(r, h*s), randVec(r, h*s), randVec(r, h*s)
	L2Norm(q, s, 1e-6)
	L2Norm(k, s, 1e-6)
	for i := range g {
		g[i] = -0.001 * g[i] * g[i]
	}
	beta := make([]float32, h)
	for i := range beta {
		beta[i] = 0.5
	}
	out := make([]float32, h*s)
	d := DeltaRule{Heads: h, Dim: s, KDA: true}
	p := NewPool(1)
	b.Run("new", func(b *testing.B) {
		for b.Loop() {
			d.Run(p, state, q, k, v, g, beta, out, 1)
		}
	})
	b.Run("purego", func(b *testing.B) {
		saved := deltaRows8
		deltaRows8 = deltaRows8Go
		defer func() { deltaRows8 = saved }()
		for b.Loop() {
			d.Run(p, state, q, k, v, g, beta, out, 1)
		}
	})
	b.Run("ref", func(b *testing.B) {
		for b.Loop() {
			deltaRunRef(d, state, q, k, v, g, beta, out, 1)
		}
	})
}

func BenchmarkConvStep(b *testing.B) {
	r := rand.New(rand.NewPCG(19, 20))
	const c, k = 12288, 4
	state, x, w, out := randVec(r, c*(k-1)), randVec(r, c), randVec(r, c*k), make([]float32, c)
	b.Run("new", func(b *testing.B) {
		for b.Loop() {
			ConvStep(state, x, w, out, 1, c, k)
		}
	})
	b.Run("ref", func(b *testing.B) {
		for b.Loop() {
			convStepRef(state, x, w, out, 1, c, k)
		}
	})
}

func BenchmarkSiTU(b *testing.B) {
	r := rand.New(rand.NewPCG(23, 24))
	g, u := randVec(r, 18432), randVec(r, 18432)
	g2 := make([]float32, len(g))
	b.Run("new", func(b *testing.B) {
		for b.Loop() {
			copy(g2, g)
			SiTU(g2, u, 4, 7)
		}
	})
	b.Run("ref", func(b *testing.B) {
		for b.Loop() {
			copy(g2, g)
			situRef(g2, u, 4, 7)
		}
	})
}
