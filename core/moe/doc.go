// Package moe holds Mixture-of-Experts routing shared by architectures:
// gating function, selection bias, expert groups, top-k, weight
// normalisation and scaling.
package moe
