package kernelsavx512

// Regenerate kernels_amd64.s and its stubs with:
//
//go:generate sh -c "cd ../../tools/asmgen && go run . -target avx512 -pkg kernelsavx512 -out ../../plugins/kernels-avx512/kernels_amd64.s -stubs ../../plugins/kernels-avx512/kernels_amd64.go"

// The files both kernel packages carry (they may not import each other) are
// edited in kernels-avx2 and copied here:
//
//go:generate ./sync-shared.sh
