package ops

// Causal describes one batch of causal attention over a half cache: N
// queries at positions Pos..Pos+N-1, each seeing cache rows [0, its
// position], in Heads query heads.
type Causal struct {
	N, Pos int
	Heads  int
	Scale  float32
	// Ctx is the sequence's context (llama.cpp's n_ctx; 0: unbounded),
	// which bounds the cache view that decides the decode kernel.
	Ctx int
}

// Attend runs c with the kernel ggml's CPU flash attention picks for a
// batch of this size: the tiled float32 kernel from FlashTileQ queries on,
// the one-query half kernel below, split across the pool's threads when a
// single query looks at 512 or more cache cells. Query head h of token t
// is q[t*qStride+h*DK:], its output out[t*outStride+h*DV:]; kvOf(h) gives
// the ranges of head h's key and value in a row of rows (GQA: several
// query heads share one).
func (p *Pool) Attend(c Causal, q []float32, qStride int, kvOf func(h int) HalfKV, rows []uint16, out []float32, outStride int) {
	tiled := c.N >= FlashTileQ
	// llama.cpp's KV view covers max(256, used rounded up to 256) cells,
	// at most the context; one query over 512+ cells takes the split path.
	nkv := max(256, (c.Pos+c.N+255)/256*256)
	if c.Ctx > 0 {
		nkv = min(nkv, c.Ctx)
	}
	split := c.N == 1 && nkv >= 512
	if tiled {
		p.attendTiled(c, q, qStride, kvOf, rows, out, outStride)
		return
	}
	p.For(c.N*c.Heads, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			t, h := i/c.Heads, i%c.Heads
			kv := kvOf(h)
			kv.Data = rows
			visible := c.Pos + t + 1
			qr := q[t*qStride+h*kv.DK:][:kv.DK]
			o := out[t*outStride+h*kv.DV:][:kv.DV]
			switch {
			case split:
				AttendHalfSplit(qr, kv, visible, nkv, p.Threads(), c.Scale, o)
			default:
				AttendHalf(qr, kv, visible, c.Scale, o)
			}
		}
	})
}
