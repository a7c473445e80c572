// Package engine owns sequences and their state (KV / latent caches,
// recurrent state), prefill and decode scheduling.
package engine
