package kimik3

import (
	"github.com/k3-inference/k3/core/moe"
	"github.com/k3-inference/k3/core/ops"
)

// A long forward call (a prefill chunk) runs every step of a layer except
// the routed experts a few rows at a time, so that what lives for the
// whole call is only the residual stream, the banked inputs of the
// attention residuals, the routed experts' input and their per-slot
// outputs (which ggml adds in slot order, so all of a token's must exist
// before its sum): the chunk, and with it the bytes a prompt reads from
// storage, is bounded by those and not by attention or projection
// scratch. Each token's arithmetic is the same as in one piece: rows are
// independent in every step but attention and the delta rule, which take
// the sequence's memory row range by row range, and every range has at
// least ops.FlashTileQ rows (the kernel llama.cpp picks for a batch
// depends on its size) and starts at a multiple of the delta-rule chunk.

// subRows is the most rows a step of a long forward call runs at once
// (before the last range is merged into the one before it).
var subRows = 64

// subRange is the rows [lo, hi) of a pass.
type subRange struct{ lo, hi int }

// ranges splits the pass's rows into ranges of sub rows, the last merged
// into the one before when shorter than ops.FlashTileQ. One range: the
// call runs in one piece (layer).
func (ps *pass) ranges() []subRange {
	sub := subRows
	if c := ps.m.chunk; c > 0 {
		sub = (sub + c - 1) / c * c
	}
	if ps.n <= sub+ops.FlashTileQ || len(ps.spans) != 1 {
		return []subRange{{0, ps.n}}
	}
	var rs []subRange
	for lo := 0; lo < ps.n; lo += sub {
		rs = append(rs, subRange{lo, min(lo+sub, ps.n)})
	}
	if last := rs[len(rs)-1]; len(rs) > 1 && last.hi-last.lo < ops.FlashTileQ {
		rs = rs[:len(rs)-1]
		rs[len(rs)-1].hi = last.hi
	}
	return rs
}

// maxSubRows bounds the rows of one range of ranges.
func maxSubRows(chunk int) int {
	sub := subRows
	if chunk > 0 {
		sub = (sub + chunk - 1) / chunk * chunk
	}
	return sub + ops.FlashTileQ
}

// rows is ps narrowed to rows [lo, hi) of its single sequence, banked
// inputs included.
func (ps *pass) rows(r subRange) *pass {
	E := ps.m.p.Embd
	sub := *ps
	sp := ps.spans[0]
	sub.n = r.hi - r.lo
	sub.spans = []span{{seq: sp.seq, pos: sp.pos + r.lo, n: sub.n}}
	sub.stack = make([][]float32, len(ps.stack))
	for i, s := range ps.stack {
		sub.stack[i] = s[r.lo*E : r.hi*E]
	}
	return &sub
}

// ffnInput is the normed FFN input of the rows of ps whose stream after
// attention is h.
func (ps *pass) ffnInput(l *layer, h []float32) []float32 {
	p := ps.m.p
	cur := h
	if p.ResBlock > 0 {
		cur = ps.resMix(h, l.ffnScore)
	}
	normed := ps.buf(len(cur))
	ops.RMSNorm(normed, cur, l.ffnNorm, p.Embd, p.Eps)
	return normed
}

// layerRanges is layer for a call of several ranges: attention, the
// dense FFN, the router and the latent down-projection range by range;
// the routed experts over the whole call (each expert read once); then
// their sum, the up-projection and the shared experts range by range.
func (ps *pass) layerRanges(il int, x []float32, rs []subRange) ([]float32, error) {
	p, l := ps.m.p, &ps.m.layers[il]
	E := p.Embd
	useRes := p.ResBlock > 0
	banked := useRes && il%p.ResBlock == 0
	// h is the stream after attention: x itself, which nothing else
	// holds, unless x is banked.
	h := x
	if banked {
		h = make([]float32, len(x))
	}
	f, routed := l.ffn.(*sparse)
	var logits, in []float32
	if routed {
		logits, in = ps.chunkBufs(f)
	}
	for _, r := range rs {
		ps.sc.Reset()
		sub := ps.rows(r)
		xs, hs := x[r.lo*E:r.hi*E], h[r.lo*E:r.hi*E]
		cur := xs
		if useRes {
			cur = sub.resMix(xs, l.attnScore)
		}
		normed := sub.buf(len(cur))
		ops.RMSNorm(normed, cur, l.attnNorm, E, p.Eps)
		attn, err := l.attn.forward(sub, il, normed)
		if err != nil {
			return nil, err
		}
		if banked {
			copy(hs, attn) // the stream restarts from the attention output
			sub.stack = append(sub.stack, xs)
		} else {
			for i := range hs {
				hs[i] = xs[i] + attn[i]
			}
		}
		normed = sub.ffnInput(l, hs)
		if !routed {
			out, err := l.ffn.forward(sub, normed)
			if err != nil {
				return nil, err
			}
			for i := range hs {
				hs[i] += out[i]
			}
			continue
		}
		if err := ps.m.experts.Logits(&f.routed, normed, sub.n, logits[r.lo*p.Router.Experts:]); err != nil {
			return nil, err
		}
		lat := p.latent()
		if f.RoutedDown != nil {
			if normed, err = sub.matmul(f.RoutedDown, normed, sub.n); err != nil {
				return nil, err
			}
		}
		copy(in[r.lo*lat:r.hi*lat], normed)
	}
	if banked {
		ps.stack = append(ps.stack, x)
	}
	if routed {
		if err := ps.routedRanges(l, f, h, logits, in, rs); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// chunkBufs are the router logits and the routed experts' input of the
// whole call, reused from layer to layer.
func (ps *pass) chunkBufs(f *sparse) (logits, in []float32) {
	p := ps.m.p
	ps.logits = grow(ps.logits, ps.n*p.Router.Experts)
	ps.in = grow(ps.in, ps.n*p.latent())
	return ps.logits, ps.in
}

// routedRanges runs the routed experts over the whole call, then adds
// their sum, normed and projected up, and the shared experts to h range by
// range.
func (ps *pass) routedRanges(l *layer, f *sparse, h, logits, in []float32, rs []subRange) error {
	p, E := ps.m.p, ps.m.p.Embd
	b, err := ps.m.experts.RouteLogits(&f.routed, logits, ps.n)
	if err != nil {
		return err
	}
	lat, k := p.latent(), b.Used
	ps.outs = grow(ps.outs, len(b.IDs)*lat)
	ps.sc.Reset()
	if err := ps.m.experts.Outs(&f.routed, b, in, ps.outs, ps.sc); err != nil {
		return err
	}
	for _, r := range rs {
		ps.sc.Reset()
		sub := ps.rows(r)
		sum := sub.buf(sub.n * lat)
		moe.SumSlots(ps.outs, k, lat, r.lo, r.hi, sum)
		hs := h[r.lo*E : r.hi*E]
		var sh []float32
		if f.GateSh != nil {
			// The shared experts' input again: it is a function of the
			// stream and the banked inputs, cheaper to remake than to keep.
			gu, err := sub.matmuls(sub.ffnInput(l, hs), sub.n, f.GateSh, f.UpSh)
			if err != nil {
				return err
			}
			ops.SiTU(gu[0], gu[1], p.SituBeta, p.SituLB)
			if sh, err = sub.matmul(f.DownSh, gu[0], sub.n); err != nil {
				return err
			}
		}
		out, err := f.up(sub, sum, sh)
		if err != nil {
			return err
		}
		for i := range hs {
			hs[i] += out[i]
		}
	}
	return nil
}

// predictRanges is predict for a call of several ranges: the router
// logits range by range, the guess over the whole call.
func (ps *pass) predictRanges(il int, x []float32, rs []subRange) error {
	p, l := ps.m.p, &ps.m.layers[il]
	f := l.ffn.(*sparse)
	logits, _ := ps.chunkBufs(f)
	for _, r := range rs {
		ps.sc.Reset()
		sub := ps.rows(r)
		normed := sub.buf(sub.n * p.Embd)
		ops.RMSNorm(normed, x[r.lo*p.Embd:r.hi*p.Embd], l.ffnNorm, p.Embd, p.Eps)
		if err := ps.m.experts.Logits(&f.routed, normed, sub.n, logits[r.lo*p.Router.Experts:]); err != nil {
			return err
		}
	}
	return ps.m.experts.PredictLogits(&f.routed, logits, ps.n)
}

// grow returns b with length n, reusing its memory when large enough.
func grow(b []float32, n int) []float32 {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]float32, n)
}
