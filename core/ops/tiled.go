package ops

import (
	"math"

	"github.com/k3-inference/k3/core/quant"
)

// The tiled flash-attention kernel for many queries over one cache: ggml's
// tiled kernel (ggml_compute_forward_flash_attn_ext_tiled) converts a tile
// of 64 keys and values to float32 once and runs every query of its tile
// against them, its products summed in order per score and per output
// element. AttendTiled is that arithmetic for one query; attendTiledMany
// gives each of its queries AttendTiled's bits, converting each tile once
// for all of them (the heads of an MLA layer share one latent row; those of
// a GQA group, one key and value) and running the products eight or more
// scores or outputs per instruction: a lane is one score or output
// element, so each keeps its own sequential sum.

// tiledQuery is one query of attendTiledMany: it sees cache rows
// [0, visible) and writes DV values to out.
type tiledQuery struct {
	q       []float32
	visible int
	out     []float32
}

// tileScores sets out[tk] to the float32 dot product, summed in order, of
// q's dk values with column tk of kt (dk rows of flashTileKV floats).
var tileScores = tileScoresGo

func tileScoresGo(q, kt []float32, out *[flashTileKV]float32) {
	var s [flashTileKV]float32
	for i, x := range q {
		row := kt[i*flashTileKV:][:flashTileKV]
		for tk := range s {
			s[tk] += x * row[tk]
		}
	}
	*out = s
}

// tileAccum adds w[tk]·v[tk] for tk in order to acc, element by element:
// row tk of v starts at tk*stride.
var tileAccum = tileAccumGo

func tileAccumGo(acc, w, v []float32, stride int) {
	for tk, x := range w {
		row := v[tk*stride:][:len(acc)]
		for d := range acc {
			acc[d] += x * row[d]
		}
	}
}

// widenHalf sets dst to the float32 values of the halves in src.
var widenHalf = widenHalfGo

func widenHalfGo(dst []float32, src []uint16) {
	for i, h := range src[:len(dst)] {
		dst[i] = quant.FP16ToFP32(h)
	}
}

// attendTiledMany runs AttendTiled for each query of qs over kv.
func attendTiledMany(qs []tiledQuery, kv HalfKV, scale float32) {
	dk, dv := kv.DK, kv.DV
	last := 0
	for _, x := range qs {
		last = max(last, x.visible)
	}
	nq := len(qs)
	bp := getFloats(dk*flashTileKV + flashTileKV*dv + max(dk, dv) + 2*nq)
	defer putFloats(bp)
	buf := *bp
	kt := buf[:dk*flashTileKV]
	vt := buf[len(kt):][:flashTileKV*dv]
	row := buf[len(kt)+len(vt):][:max(dk, dv)]
	ms := buf[len(kt)+len(vt)+len(row):][:nq]
	ss := buf[len(kt)+len(vt)+len(row)+nq:][:nq]
	clear(kt) // the columns past a short last tile are read, and masked
	for i := range qs {
		clear(qs[i].out[:dv])
		ms[i], ss[i] = negInf, 0
	}
	var kq [flashTileKV]float32
	for ic := 0; ic < last; ic += flashTileKV {
		tile := min(flashTileKV, last-ic)
		for tk := 0; tk < tile; tk++ {
			r := kv.Data[(ic+tk)*kv.Stride:]
			widenHalf(row[:dk], r[kv.KOff:kv.KOff+dk])
			for i, x := range row[:dk] {
				kt[i*flashTileKV+tk] = x
			}
			widenHalf(vt[tk*dv:(tk+1)*dv], r[kv.VOff:kv.VOff+dv])
		}
		for qi := range qs {
			x := &qs[qi]
			n := min(tile, x.visible-ic)
			if n <= 0 {
				continue // a tile wholly masked: ggml skips it too
			}
			tileScores(x.q[:dk], kt, &kq)
			tileMax := float32(math.Inf(-1))
			for tk := 0; tk < n; tk++ {
				kq[tk] *= scale
				tileMax = max(tileMax, kq[tk])
			}
			for tk := n; tk < flashTileKV; tk++ {
				kq[tk] = negInf
			}
			acc := x.out[:dv]
			M := ms[qi]
			Mnew := max(M, tileMax)
			if Mnew > M {
				m := Exp(M - Mnew)
				for d := range acc {
					acc[d] *= m
				}
				ss[qi] *= m
			}
			ms[qi] = Mnew
			sum := expSum(kq[:], kq[:], Mnew)
			ss[qi] = float32(float64(ss[qi]) + sum)
			tileAccum(acc, kq[:n], vt, dv)
		}
	}
	for qi := range qs {
		inv := float32(0)
		if ss[qi] != 0 {
			inv = 1 / ss[qi]
		}
		acc := qs[qi].out[:dv]
		for d := range acc {
			acc[d] *= inv
		}
	}
}

// attendTiled is Attend's tiled path: the queries are cut into items of a
// few tokens times the heads that share a key and value, and each item's
// queries run together (attendTiledMany), so a tile is converted once per
// item instead of once per query.
func (p *Pool) attendTiled(c Causal, q []float32, qStride int, kvOf func(h int) HalfKV, rows []uint16, out []float32, outStride int) {
	type group struct {
		kv    HalfKV
		heads []int
	}
	var groups []group
	for h := 0; h < c.Heads; h++ {
		kv := kvOf(h)
		kv.Data = rows
		found := false
		for i := range groups {
			g := &groups[i].kv
			if g.Stride == kv.Stride && g.KOff == kv.KOff && g.DK == kv.DK && g.VOff == kv.VOff && g.DV == kv.DV {
				groups[i].heads = append(groups[i].heads, h)
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, group{kv: kv, heads: []int{h}})
		}
	}
	// Tokens per item: enough items for the pool's threads to balance
	// (later tokens see more of the cache), at most tiledTokens.
	per := max(1, min(tiledTokens, c.N*len(groups)/(4*p.Threads())))
	blocks := (c.N + per - 1) / per
	p.For(blocks*len(groups), 1, func(lo, hi int) {
		var qs []tiledQuery
		for it := lo; it < hi; it++ {
			g := groups[it%len(groups)]
			t0 := it / len(groups) * per
			qs = qs[:0]
			for t := t0; t < min(c.N, t0+per); t++ {
				for _, h := range g.heads {
					qs = append(qs, tiledQuery{
						q:       q[t*qStride+h*g.kv.DK:][:g.kv.DK],
						visible: c.Pos + t + 1,
						out:     out[t*outStride+h*g.kv.DV:][:g.kv.DV],
					})
				}
			}
			attendTiledMany(qs, g.kv, c.Scale)
		}
	})
}

// tiledTokens bounds the tokens of one attendTiled item.
const tiledTokens = 16
