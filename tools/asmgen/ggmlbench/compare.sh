#!/bin/sh
# compare.sh runs llama.cpp's vec_dot (ggmlbench, libggml-cpu-zen4.so or
# $GGML_VARIANT) and k3's kernels (go test -bench) alternately, $ROUNDS
# times, and prints the best time of each with the ratio llama.cpp/k3 (> 1:
# k3 is faster). Run from the repository root. The machine is shared, so
# only ratios measured in the same run mean anything.
set -e
ROUNDS=${ROUNDS:-3}
L=$PWD/tools/parity/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
VARIANT=${GGML_VARIANT:-zen4}
OUT=$(mktemp -d)
gcc -O2 -I/work/llama.cpp-src/ggml/include tools/asmgen/ggmlbench/ggmlbench.c -o "$OUT/ggmlbench" \
	-ldl -L"$L" -lggml-base -Wl,-rpath,"$L"
go test -c -o "$OUT/avx2.test" ./plugins/kernels-avx2/
go test -c -o "$OUT/avx512.test" ./plugins/kernels-avx512/
for r in $(seq "$ROUNDS"); do
	"$OUT/ggmlbench" "$L/libggml-cpu-$VARIANT.so" >>"$OUT/ggml.txt"
	for p in avx2 avx512; do
		"$OUT/$p.test" -test.run '^$' -test.bench 'Dot/' -test.benchtime 20000x >>"$OUT/go.txt"
		"$OUT/$p.test" -test.run '^$' -test.bench 'MatVec/.*/.*/t1' -test.benchtime 20x >>"$OUT/go.txt"
	done
done
python3 - "$OUT/ggml.txt" "$OUT/go.txt" <<'PY'
import re, sys
ggml = {}
for line in open(sys.argv[1]):
    f = line.split()
    t, dot, mv = f[0], float(f[2]), float(f[7])
    old = ggml.get(t, (1e30, 1e30))
    ggml[t] = (min(old[0], dot), min(old[1], mv))
best = {}
for line in open(sys.argv[2]):
    m = re.match(r'Benchmark(Dot|MatVec)/(\S+?)/(\w+)(/t1)?-\d+\s+\d+\s+([\d.]+) ns/op', line)
    if m:
        k = (m.group(1), m.group(2), m.group(3))
        best[k] = min(best.get(k, 1e30), float(m.group(5)))
levels = sorted({k[2] for k in best}, key=lambda l: ['generic', 'avx2', 'avx512', 'vnni', 'vnni256'].index(l))
print("hot 4096-element row (ns) and 4096x4096 matvec, 1 thread (us); ratio = llama.cpp time / k3 time")
print("%-6s %8s %s" % ("type", "ggml", " ".join("%16s" % l for l in levels)))
for t in ggml:
    for kind, idx, unit in (("Dot", 0, 1), ("MatVec", 1, 1000)):
        g = ggml[t][idx]
        cells = []
        for l in levels:
            v = best.get((kind, t, l))
            cells.append("%16s" % ("-" if v is None else "%.0f (%.2fx)" % (v / unit, g / v)))
        print("%-6s %-6s %8.0f %s" % (t, kind, g / unit, " ".join(cells)))
PY
