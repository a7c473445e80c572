// Package stagingmmap is a Stager that maps the GGUF shards and uses the page
// cache as the expert cache, steered with madvise/readahead within a budget.
package stagingmmap
