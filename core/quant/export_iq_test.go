package quant

// IQGridTables exposes the IQ grid and sign tables by their ggml names, as
// unsigned bit patterns, for the header check in package quant_test.
func IQGridTables() map[string][]uint64 {
	m := map[string][]uint64{}
	add := func(name string, n int, at func(int) uint64) {
		v := make([]uint64, n)
		for i := range v {
			v[i] = at(i)
		}
		m[name] = v
	}
	add("kmask_iq2xs", len(kmaskIq2xs), func(i int) uint64 { return uint64(kmaskIq2xs[i]) })
	add("ksigns_iq2xs", len(ksignsIq2xs), func(i int) uint64 { return uint64(ksignsIq2xs[i]) })
	add("iq2xxs_grid", len(iq2xxsGrid), func(i int) uint64 { return iq2xxsGrid[i] })
	add("iq2xs_grid", len(iq2xsGrid), func(i int) uint64 { return iq2xsGrid[i] })
	add("iq2s_grid", len(iq2sGrid), func(i int) uint64 { return iq2sGrid[i] })
	add("iq3xxs_grid", len(iq3xxsGrid), func(i int) uint64 { return uint64(iq3xxsGrid[i]) })
	add("iq3s_grid", len(iq3sGrid), func(i int) uint64 { return uint64(iq3sGrid[i]) })
	add("iq1s_grid", len(iq1sGrid), func(i int) uint64 { return iq1sGrid[i] })
	return m
}
