// Package moe is the Mixture-of-Experts machinery shared by architectures:
// routing (gating function, selection bias, expert groups, top-k, weight
// normalisation and scaling), and the streaming expert runner every MoE
// model calls (hint, acquire in budget-sized groups, grouped expert
// matrix products, release, lookahead guesses) over an ExpertSource.
package moe
