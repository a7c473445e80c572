package moe

// Batch is the routing of a batch of tokens, grouped by expert so that a
// prefill reads each chosen expert's weights once per layer whatever the
// number of tokens that chose it.
type Batch struct {
	Used    int       // experts per token
	IDs     []int32   // [token*Used + slot] chosen expert
	Weights []float32 // [token*Used + slot] its weight

	// Experts lists each expert chosen by at least one token, ascending
	// (after Front: the fronted ones first); Rows[Start[i]:Start[i+1]]
	// are the token*Used+slot indices routed to Experts[i], in ascending
	// token order.
	Experts []int32
	Start   []int
	Rows    []int32

	count []int32
}

// Reset sizes b for n tokens of k experts each.
func (b *Batch) Reset(n, k int) {
	b.Used = k
	b.IDs = grow(b.IDs, n*k)
	b.Weights = grow(b.Weights, n*k)
}

// Group fills Experts, Start and Rows from IDs; nExpert bounds the ids.
func (b *Batch) Group(nExpert int) {
	b.count = grow(b.count, nExpert)
	clear(b.count)
	for _, id := range b.IDs {
		b.count[id]++
	}
	b.Experts = b.Experts[:0]
	b.Start = append(b.Start[:0], 0)
	for e, c := range b.count {
		if c > 0 {
			b.Experts = append(b.Experts, int32(e))
			b.Start = append(b.Start, b.Start[len(b.Start)-1]+int(c))
		}
	}
	// count becomes each expert's next write position.
	for i, e := range b.Experts {
		b.count[e] = int32(b.Start[i])
	}
	b.Rows = grow(b.Rows, len(b.IDs))
	for r, id := range b.IDs {
		b.Rows[b.count[id]] = int32(r)
		b.count[id]++
	}
}

// Front moves the experts of first that the batch chose to the front of
// Experts, in first's order, the others keeping theirs: the runner
// computes the experts whose reads a lookahead guess started before the
// ones whose reads start now.
func (b *Batch) Front(first []int32) {
	if len(first) == 0 {
		return
	}
	order := make([]int, 0, len(b.Experts))
	taken := make([]bool, len(b.Experts))
	for _, e := range first {
		for i, x := range b.Experts {
			if x == e && !taken[i] {
				order, taken[i] = append(order, i), true
				break
			}
		}
	}
	if len(order) == 0 {
		return
	}
	for i := range b.Experts {
		if !taken[i] {
			order = append(order, i)
		}
	}
	experts := make([]int32, 0, len(b.Experts))
	start := make([]int, 1, len(b.Start))
	rows := make([]int32, 0, len(b.Rows))
	for _, i := range order {
		experts = append(experts, b.Experts[i])
		rows = append(rows, b.Rows[b.Start[i]:b.Start[i+1]]...)
		start = append(start, len(rows))
	}
	b.Experts, b.Start, b.Rows = experts, start, rows
}
