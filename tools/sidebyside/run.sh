#!/usr/bin/env bash
# Side by side: k3 and llama.cpp on this machine with the same threads.
#   (a) matrix × vector per type: k3's kernels (BenchmarkSideBySide in
#       plugins/kernels-avx2 and kernels-avx512) vs ggml's CPU backend
#       (k3ref matvec, without and with CPU_REPACK), on a matrix that stays
#       in L3 (4096×4096), one that streams from memory (32768×4096) and
#       one of long rows (4096×14336, an FFN down projection's);
#   (b) end to end: `k3 bench` vs `k3ref bench` (llama.cpp, llama-bench's
#       method; with its default weight repacking and with --no-repack) on
#       k3 synth models of ~3 GB read from the page cache;
#   (c) where a decode step's time goes: go tool pprof -top of
#       `k3 bench --cpuprofile`; (d) llama.cpp's, by perf, where perf exists.
# k3 and llama.cpp runs alternate (ABAB...) within every round — for
# matrix × vector type by type — so load drift on a shared machine hits
# both; ratios are k3 / llama.cpp (> 1: k3
# faster). Run from anywhere; prints the tables and writes everything
# (raw JSON, benchmark output, profile) under $OUT.
#
# Environment: THREADS (default: nproc), ROUNDS (3), P (64 prompt tokens),
# N (32 decode steps), TYPES ("q2_k q4_k_m"), DIR (/tmp/k3-sidebyside: the
# models), OUT ($DIR/run-TIMESTAMP), MATVEC_SECONDS (0.5 per type and
# round), MV_TYPES (the matrix × vector types, default all with a kernel),
# SHAPES ("4096x4096 32768x4096 4096x14336": rows x cols), SKIP ("matvec", "e2e", "profile", "perf": any, space separated),
# KERNELS (k3 bench --kernels, default auto), KERNELS_MODE (inprocess).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-3}
P=${P:-64}
N=${N:-32}
TYPES=${TYPES:-"q2_k q4_k_m"}
DIR=${DIR:-/tmp/k3-sidebyside}
OUT=${OUT:-$DIR/run-$(date -u +%Y%m%dT%H%M%S)}
MATVEC_SECONDS=${MATVEC_SECONDS:-0.5}
SHAPES=${SHAPES:-"4096x4096 32768x4096 4096x14336"}
SKIP=${SKIP:-}
KERNELS=${KERNELS:-auto}
KERNELS_MODE=${KERNELS_MODE:-inprocess}
here=$root/tools/sidebyside
mkdir -p "$DIR" "$OUT"
exec > >(tee "$OUT/report.txt") 2>&1

log() { echo "sidebyside: $*" >&2; }
skip() { [[ " $SKIP " == *" $1 "* ]]; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "# k3 vs llama.cpp side by side, $(date -u +%FT%TZ)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs; threads: $THREADS; rounds: $ROUNDS"
echo "cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2- | tr ' ' '\n' | grep -E '^(avx|fma|f16c|bmi2|amx)' | tr '\n' ' ')"
echo "load average at start: $(load)"
echo "git: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- cmd core plugins tools/parity || echo ' (dirty)')"

log "building k3, the kernels benchmarks and k3ref"
go build -o "$OUT/k3" ./cmd/k3
go test -c -o "$OUT/avx2.test" ./plugins/kernels-avx2/
go test -c -o "$OUT/avx512.test" ./plugins/kernels-avx512/
tools/parity/setup.sh >/dev/null
K3REF=$root/tools/parity/build/k3ref
K3=$OUT/k3

# The kernels level k3 picks on this CPU (e.g. avx512:vnni256), from a
# k3 bench run on a tiny model.
[[ -f $DIR/tiny.gguf ]] || "$K3" synth -o "$DIR/tiny.gguf" >/dev/null
AUTO=$("$K3" bench -m "$DIR/tiny.gguf" -p 1 -n 1 -r 1 --no-warmup --json --kernels "$KERNELS" --kernels-mode inprocess 2>/dev/null |
	python3 -c 'import json, re, sys; k = json.load(sys.stdin)["mode"]["kernels"]; m = re.match(r"(\w+) \((\w+)\)", k); print(m.group(1) + ":" + m.group(2) if m else k)')
echo "k3 kernels on this CPU (--kernels $KERNELS): $AUTO"

# --- (a) matrix × vector ---
if ! skip matvec; then
	mv_types=${MV_TYPES:-"q2_K q3_K q4_K q5_K q6_K q8_0 q4_0 q5_0 mxfp4 iq1_s iq1_m iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq4_nl iq4_xs q4_1 q5_1 tq1_0 tq2_0 f16 bf16 f32"}
	for shape in $SHAPES; do
		rows=${shape%x*} cols=${shape#*x}
		for r in $(seq "$ROUNDS"); do
			log "matvec $shape round $r/$ROUNDS (load $(load))"
			# Type by type, each side right after the other (a type's
			# ggml and k3 runs a few seconds apart, not a whole sweep):
			# memory bandwidth on a shared host drifts within a minute.
			ggml=() repack=()
			for typ in $mv_types; do
				# f32/f16/bf16 also select f32-fast etc. (float mode fast) on the k3 side.
				K3_SBS=1 K3_SBS_ROWS=$rows K3_SBS_COLS=$cols K3_SBS_THREADS=$THREADS "$OUT/avx512.test" -test.run '^$' \
					-test.bench "SideBySide/^$typ(-fast)?\$/(avx512|vnni[a-z0-9]*)/" \
					-test.benchtime "${MATVEC_SECONDS}s" >>"$OUT/k3-matvec-$shape-avx512-$r.txt"
				"$K3REF" matvec "$typ" --rows "$rows" --cols "$cols" --threads "$THREADS" \
					--seconds "$MATVEC_SECONDS" >"$OUT/.ggml-$typ.json"
				ggml+=("$OUT/.ggml-$typ.json")
				"$K3REF" matvec "$typ" --rows "$rows" --cols "$cols" --threads "$THREADS" \
					--seconds "$MATVEC_SECONDS" --repack >"$OUT/.repack-$typ.json"
				repack+=("$OUT/.repack-$typ.json")
				K3_SBS=1 K3_SBS_ROWS=$rows K3_SBS_COLS=$cols K3_SBS_THREADS=$THREADS "$OUT/avx2.test" -test.run '^$' \
					-test.bench "SideBySide/^$typ(-fast)?\$/avx2/" \
					-test.benchtime "${MATVEC_SECONDS}s" >>"$OUT/k3-matvec-$shape-avx2-$r.txt"
			done
			merge='import json, sys; rs = [json.load(open(p)) for p in sys.argv[1:]]; rs[0]["results"] = [x for r in rs for x in r["results"]]; print(json.dumps(rs[0]))'
			python3 -c "$merge" "${ggml[@]}" >"$OUT/ggml-matvec-$shape-$r.json"
			python3 -c "$merge" "${repack[@]}" >"$OUT/ggml-matvec-repack-$shape-$r.json"
			rm -f "${ggml[@]}" "${repack[@]}"
		done
		echo
		echo "## (a) matrix × vector, $rows rows × $cols, $THREADS threads (load $(load) after)"
		python3 "$here/tables.py" matvec "$OUT" "$AUTO" "$shape"
	done
fi

# --- (b) end to end ---
synth() {
	local typ=$1 path=$DIR/$1.gguf experts=64
	[[ $typ == q4_k_m ]] && experts=32 # Q4_K is ~1.7x Q2_K: keep the file under 3 GB
	if [[ ! -f $path ]]; then
		log "writing $path"
		# Kimi K3's widths (7168 embedding, 3584 latent, 3072 expert FFN,
		# top-16 of the experts, 2 shared), 4 layers (1 dense, 3 MoE).
		"$K3" synth --preset k3 --type "$typ" --n-layer 4 --n-dense 1 --n-head 32 \
			--n-vocab 32768 --n-ff 4096 --n-expert "$experts" --workers 1 -o "$path" >&2
	fi
	echo "$path"
}

if ! skip e2e; then
	for typ in $TYPES; do
		model=$(synth "$typ")
		cat "$model" >/dev/null # into the page cache: both read it from memory
		for r in $(seq "$ROUNDS"); do
			log "e2e $typ round $r/$ROUNDS (load $(load))"
			"$K3" bench -m "$model" -p "$P" -n "$N" -t "$THREADS" -r 1 --seed "$r" --json \
				--kernels "$KERNELS" --kernels-mode "$KERNELS_MODE" >"$OUT/k3-bench-$typ-$r.json" 2>"$OUT/k3-bench-$typ-$r.log"
			"$K3REF" bench "$model" -p "$P" -n "$N" --threads "$THREADS" --reps 1 --seed "$r" \
				>"$OUT/llama-bench-$typ-$r.json"
			"$K3REF" bench "$model" -p "$P" -n "$N" --threads "$THREADS" --reps 1 --seed "$r" --no-repack \
				>"$OUT/llama-bench-norepack-$typ-$r.json"
		done
	done
	echo
	echo "## (b) end to end, p=$P n=$N, $THREADS threads, models in the page cache (load $(load) after)"
	python3 "$here/tables.py" e2e "$OUT" $TYPES
fi

# --- (c) decode profile ---
if ! skip profile; then
	typ=${TYPES%% *}
	model=$(synth "$typ")
	log "profiling $typ decode (load $(load))"
	"$K3" bench -m "$model" -p 16 -n 64 -t "$THREADS" -r 1 --cpuprofile "$OUT/decode.pprof" \
		--kernels "$KERNELS" --kernels-mode "$KERNELS_MODE" >"$OUT/profile-bench.txt" 2>&1
	echo
	echo "## (c) where k3's decode time goes ($typ, 64 decode steps, $THREADS threads): go tool pprof -top"
	go tool pprof -top -nodecount 25 "$K3" "$OUT/decode.pprof" 2>/dev/null | sed -n '1,35p'
	echo
	echo "### by cumulative time"
	go tool pprof -top -cum -nodecount 25 "$K3" "$OUT/decode.pprof" 2>/dev/null | sed -n '6,35p'
fi
# --- (d) llama.cpp's decode, by perf, for comparison ---
if ! skip perf && command -v perf >/dev/null 2>&1; then
	typ=${TYPES%% *}
	model=$(synth "$typ")
	log "perf of llama.cpp's $typ decode (load $(load))"
	# -p 1 and --no-repack: the run is a load by mmap and 33 single-token steps.
	if perf record -o "$OUT/llama.perf.data" -F 499 -- "$K3REF" bench "$model" -p 1 -n 32 --reps 1 --no-warmup \
		--no-repack --threads "$THREADS" >"$OUT/llama-perf-bench.json" 2>"$OUT/llama-perf.log"; then
		echo
		echo "## (d) where llama.cpp's decode time goes ($typ, 33 single-token steps, $THREADS threads): perf report"
		perf report -i "$OUT/llama.perf.data" --no-children --sort dso,symbol 2>/dev/null | grep -E '^ +[0-9.]+%' | head -15
	else
		log "perf record failed (see $OUT/llama-perf.log)"
	fi
fi
echo
echo "load average at end: $(load); raw results in $OUT"
