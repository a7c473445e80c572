// Package sample turns logits into tokens: greedy, temperature, top-k/p,
// min-p, penalties, logit bias, seeded randomness, stop conditions.
package sample
