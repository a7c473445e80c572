package kimik3

// SetSubRows sets the rows a step of a long forward call runs at once and
// returns a function that restores it.
func SetSubRows(n int) func() {
	old := subRows
	subRows = n
	return func() { subRows = old }
}
