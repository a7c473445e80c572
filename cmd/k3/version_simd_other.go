//go:build !amd64 || noasm

package main

// simdCompiled is empty off amd64 and with the noasm tag: the kernels
// plugins run core/quant's pure-Go reference ("generic" level) there.
var simdCompiled []string
