#!/bin/sh
# Copies the files both kernel packages carry from kernels-avx2 (where they
# are edited) into this package; TestSharedFilesIdentical checks the result.
set -e
cd "$(dirname "$0")"
for f in kernels.go wrap.go matvec.go kernels_test.go bench_test.go; do
	sed 's/^package kernelsavx2$/package kernelsavx512/' "../kernels-avx2/$f" >"$f"
done
