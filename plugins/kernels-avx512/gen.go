package kernelsavx512

// Regenerate kernels_amd64.s and its stubs with:
//
//go:generate sh -c "cd ../../tools/asmgen && go run . -target avx512 -pkg kernelsavx512 -out ../../plugins/kernels-avx512/kernels_amd64.s -stubs ../../plugins/kernels-avx512/kernels_amd64.go"
