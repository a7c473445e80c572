package server

// RequestDefaults are the server-wide values of sampling fields a request
// leaves out, as llama-server's --temp, --seed and -n set them.
type RequestDefaults struct {
	// Temperature: nil means llama-server's 0.8.
	Temperature *float64
	// Seed: nil or -1 draws a random seed per request.
	Seed *int64
	// NPredict bounds generated tokens; -1 or 0: until the context is full.
	NPredict int
	// EnableThinking is the chat template's enable_thinking for requests
	// whose chat_template_kwargs do not set it (--reasoning on|off); nil:
	// the template's default.
	EnableThinking *bool
}

// apply fills the fields f leaves out. A default n_predict larger than
// the context is held to the context rather than refused: the operator
// set it, not the client.
func (d RequestDefaults) apply(f *samplingFields, ctxLen int) {
	if f.Temperature == nil && d.Temperature != nil {
		t := *d.Temperature
		f.Temperature = &t
	}
	if f.Seed == nil && d.Seed != nil && *d.Seed >= 0 {
		seed := *d.Seed
		f.Seed = &seed
	}
	if f.MaxTokens == nil && f.MaxCompletionTokens == nil && f.NPredict == nil && d.NPredict > 0 {
		n := min(d.NPredict, ctxLen)
		f.NPredict = &n
	}
}
