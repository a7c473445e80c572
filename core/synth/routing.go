package synth

import (
	"fmt"
	"math"
	"strings"
)

// Routing names how a synthetic file's routers behave.
const (
	// RoutingRandom (the default, also "") draws every router entry at
	// random: a token's experts are nearly independent from layer to layer
	// and from token to token.
	RoutingRandom = "random"
	// RoutingRealistic shapes the routers and the residual stream so the
	// statistics caching and lookahead live on match Kimi K3's published
	// router (routingRows).
	RoutingRealistic = "realistic"
)

// RoutingModes lists the values of Config.Routing.
var RoutingModes = []string{RoutingRandom, RoutingRealistic}

func (c *Config) validateRouting() error {
	switch c.Routing {
	case "", RoutingRandom, RoutingRealistic:
		return nil
	}
	return fmt.Errorf("synth: unknown routing %q (have %v)", c.Routing, RoutingModes)
}

// Realistic routing. The published Kimi K3 router measurements the
// construction aims at, as `k3 inspect --routing` measures them (one token
// at a time, random token ids): next-layer lookahead precision 0.92 / 0.81 /
// 0.59 for the top-1 / top-6 / top-16 guess, next-token expert reuse ~0.30,
// near-uniform expert popularity.
//
// The construction works in a router subspace S, the first routeDims(cfg)
// coordinates of the residual stream (coordinates rather than a rotated
// basis, so that it is a matter of which rows of a tensor are drawn how,
// and pooled tensors keep their fast path for every other row):
//
//   - Every router row reads S alone, with the same norm for every expert
//     (routerGain): with a zero-mean input in S every expert has the same
//     chance, so popularity is uniform up to sampling; exp_probs_b is zero.
//     Over a random S input the logits are near-Gaussian across experts.
//   - The token embedding is left as drawn: its S part is each token's own
//     random code.
//   - FFN outputs (dense, shared, routed up-projection, and routed down
//     where the experts write the stream) write nothing into S: a layer's
//     FFN does not move the next layer's routing.
//   - Layer 0's attention output writes its context (a decaying or causal
//     average of earlier tokens' values) into S with gain routingGains.reuse:
//     consecutive tokens' router inputs then correlate, which is next-token
//     expert reuse; the average moves on with the text. It does cluster
//     the counts over a short prompt: popularity CV measures about that
//     of random routers, 2-2.6x uniform's over 24-100 tokens.
//   - Every later layer's attention output writes into S with gain
//     driftGain(cfg): it is what changes between the lookahead guess (made
//     from the previous layer's output) and the layer's real router input,
//     so it sets the lookahead precision. With Gaussian logits and
//     independent noise of relative size sigma, top-1/6/16 precision
//     follows 0.92/0.81/0.59 at sigma ~0.7 for 128 experts and ~0.45 for
//     896 (more experts crowd the top 16 closer), so the gain falls with
//     the expert count. One noise level for every token and layer matters:
//     a mix of exact and noisy guesses flattens the curve (top-1 too low,
//     top-16 too high). So MLA layers, whose softmax output moves less
//     from token to token than KDA's, get mlaDrift times the gain, and
//     Kimi K3's attention-residual scores are zero (an even mix of the
//     banks and the stream; random scores made the noise differ per token).
//   - The S rows of attention outputs are centred (zero sum): KDA's values
//     pass a SiLU, so its output has a mean that a row would turn into a
//     fixed offset in S, favouring the same experts for every token.
//
// The gains were calibrated on kimi-k3 files of 128 experts with
// `k3 inspect --routing` (tools/cgroup-bench/ISSUE17.md has the scan;
// cmd/k3's TestRealisticRouting checks a small file stays in the bands);
// deepseek2's and qwen3moe's on their tiny presets with 128 experts (64
// tokens: qwen3moe 0.91/0.79/0.58, reuse 0.29; deepseek2 0.79/0.72/0.57,
// reuse 0.20, whose curve stays flatter than K3's at any drift tried).
const (
	routeDimsMax = 256
	routerGain   = 1.5
)

// mlaDrift multiplies Kimi K3's drift gain on its MLA layers, whose
// softmax attention output moves less from token to token than KDA's.
const mlaDrift = 2

// Per-architecture attention-output gains into S (std of a row entry times
// sqrt(fan-in)): how strongly layer 0's attention (reuse) and the later
// layers' attention (lookahead drift, for 128 experts) write the router
// subspace. The attention blocks differ (KDA with per-head norms and
// decay, MLA, GQA), so the same gain moves S by different amounts.
var routingGains = map[string]struct{ reuse, drift float64 }{
	Arch:          {reuse: 4, drift: 4},
	ArchDeepSeek2: {reuse: 4, drift: 2},
	ArchQwen3MoE:  {reuse: 1, drift: 2},
}

// routeDims is the width of the router subspace: a quarter of the stream,
// at most routeDimsMax.
func routeDims(cfg *Config) int { return min(routeDimsMax, max(1, cfg.NEmbd/4)) }

func (c *Config) arch() string {
	if c.Arch == "" {
		return Arch
	}
	return c.Arch
}

// driftGain is the later layers' attention gain into S for cfg's expert
// count: sigma ~ 0.7 at 128 experts and ~0.45 at 896 is about
// sqrt(128/n)^0.45 times the 128-expert value.
func driftGain(cfg *Config) float64 {
	return routingGains[cfg.arch()].drift * math.Pow(128/float64(cfg.NExpert), 0.225)
}

// withRouting sets, for realistic routing, the row functions of the
// tensors the construction above shapes.
func withRouting(cfg *Config, defs []tensorDef) []tensorDef {
	if cfg.Routing != RoutingRealistic {
		return defs
	}
	s := int64(routeDims(cfg))
	E := int64(cfg.NEmbd)
	for i := range defs {
		d := &defs[i]
		name := d.Name
		switch {
		case strings.HasSuffix(name, ".ffn_gate_inp.weight"):
			d.Rows = func(_ int64, src []float32) bool {
				var n float64
				for j := range src {
					if int64(j) >= s {
						src[j] = 0
					} else {
						n += float64(src[j]) * float64(src[j])
					}
				}
				g := float32(routerGain / math.Sqrt(max(n, 1e-30)))
				for j := range src[:s] {
					src[j] *= g
				}
				return true
			}
		case strings.HasSuffix(name, "res_score.weight"):
			d.Init = initDist{}
		case strings.HasSuffix(name, ".exp_probs_b.bias"):
			d.Init = initDist{}
		case strings.HasSuffix(name, ".attn_output.weight"):
			gain := driftGain(cfg)
			if cfg.arch() == Arch && cfg.IsMLA(layerOf(name)) {
				gain *= mlaDrift
			}
			if layerOf(name) == 0 {
				gain = routingGains[cfg.arch()].reuse
			}
			d.Rows = scaleRows(d, s, E, gain)
		case strings.HasSuffix(name, ".ffn_down.weight"), strings.HasSuffix(name, ".ffn_down_shexp.weight"),
			strings.HasSuffix(name, ".ffn_routed_up.weight"),
			strings.HasSuffix(name, ".ffn_down_exps.weight") && cfg.NLatent == 0:
			d.Rows = scaleRows(d, s, E, 0)
		}
	}
	return defs
}

// scaleRows draws the rows of an output projection that write S (row
// index mod E below s: every output coordinate of every expert) with
// entries of std gain/sqrt(fan-in); gain 0 zeroes them.
func scaleRows(d *tensorDef, s, E int64, gain float64) func(int64, []float32) bool {
	cur := float64(d.Init.Hi-d.Init.Lo) / math.Sqrt(12)
	want := gain / math.Sqrt(float64(d.rowLen()))
	f := float32(want / cur)
	return func(row int64, src []float32) bool {
		if row%E >= s {
			return false
		}
		var mean float64
		for _, v := range src {
			mean += float64(v)
		}
		m := float32(mean / float64(len(src)))
		for j := range src {
			src[j] = (src[j] - m) * f
		}
		return true
	}
}
