package engine

// LastLogits exposes the logits the sequence ended on, so external tests
// (which may import model packages; this package's internal tests may
// not) can compare them bit for bit.
func LastLogits(e *Engine) []float32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}
