package engine

// LastLogits exposes the logits the most recently used slot's sequence
// ended on, so external tests (which may import model packages; this
// package's internal tests may not) can compare them bit for bit.
func LastLogits(e *Engine) []float32 {
	for range e.slots {
		<-e.free
	}
	defer func() {
		for range e.slots {
			e.free <- struct{}{}
		}
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	var last *slot
	for _, s := range e.slots {
		if last == nil || s.used > last.used {
			last = s
		}
	}
	return last.last
}

// StepStats reports the decode steps run and the sequences they ran.
func StepStats(e *Engine) (steps, rows int64) { return e.step.stats() }

// PrefillStats reports the forward calls that ran prompt batches and the
// prompt batches they ran.
func PrefillStats(e *Engine) (calls, batches int64) { return e.step.prefillStats() }
