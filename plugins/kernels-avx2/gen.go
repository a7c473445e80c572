package kernelsavx2

// Regenerate kernels_amd64.s and its stubs with:
//
//go:generate sh -c "cd ../../tools/asmgen && go run . -target avx2 -pkg kernelsavx2 -out ../../plugins/kernels-avx2/kernels_amd64.s -stubs ../../plugins/kernels-avx2/kernels_amd64.go"
