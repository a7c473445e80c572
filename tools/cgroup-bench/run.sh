#!/usr/bin/env bash
# Runs a synthetic kimi-k3 model at least 3x larger than a memory cgroup's
# limit (page cache included) through k3 eval with staging-pread and with
# staging-mmap, and through llama.cpp (the parity harness's k3ref) in the
# same cgroup, and writes a table of the results. Needs root, cgroup v1
# memory at /sys/fs/cgroup/memory, and ~8 GB of free disk. See README.md.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${DIR:-/var/tmp/k3-cgbench}
LIMIT=${LIMIT:-2G}            # cgroup memory.limit_in_bytes
BUDGET=${BUDGET:-1900M}       # k3's --memory-budget (stager gets it less a reserve)
N=${N:-64}                    # tokens generated
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-1,2,3,4,5,6,7,8}
KEEP=${KEEP:-0}               # 1: keep the model file afterwards
# Runs of k3 eval, each STAGER:KERNELS:KERNELS_MODE[:nolookahead]. The
# reference kernels are the core's Go ops on the core's own views; the
# avx512 kernels plugin maps the weights itself.
DEPTH=${DEPTH:-}              # --prefetch-depth for every k3 run (default: the auto profile's)
RUNS=${RUNS-"pread:auto:inprocess pread:auto:process pread:auto:inprocess:nolookahead mmap:reference:inprocess mmap:auto:process"}
LLAMA=${LLAMA:-1}             # 0: skip llama.cpp
# llama.cpp variants: default (weights of some types repacked into anonymous
# memory, as llama.cpp's CPU backend does by default) and norepack (every
# weight stays in the mapped file: --no-repack).
LLAMA_VARIANTS=${LLAMA_VARIANTS-"default norepack"}
RUN_TIMEOUT=${RUN_TIMEOUT:-420} # seconds before a run counts as not completing (exit 124)
K3REF=${K3REF:-$REPO/tools/parity/build/k3ref}
CG=/sys/fs/cgroup/memory/k3-cgbench
MODEL=$DIR/k3big.gguf
OUT=${OUT:-$DIR/results}
mkdir -p "$DIR" "$OUT"

log() { echo "[cgroup-bench $(date -u +%H:%M:%S)] $*" >&2; }

cleanup() {
	if [ -d "$CG" ]; then
		for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
		rmdir "$CG" 2>/dev/null || true
	fi
	if [ "$KEEP" != 1 ]; then rm -f "$MODEL"; fi
}
trap cleanup EXIT

log "building k3"
(cd "$REPO" && CGO_ENABLED=0 go build -o "$DIR/k3" ./cmd/k3)
K3=$DIR/k3

if [ ! -f "$MODEL" ]; then
	# Kimi K3's widths (7168 embedding, 3584 latent, 3072 expert FFN, top-16
	# routing, 2 shared experts) with fewer layers, heads, experts and a
	# smaller vocabulary: ~7.9 GB, ~1.2 GB of it always needed, 80 routed
	# experts of ~12 MB in each of 7 MoE layers.
	log "writing $MODEL"
	"$K3" synth --preset k3 --type q2_k --n-layer 8 --n-dense 1 --n-head 32 \
		--n-vocab 32768 --n-ff 4096 --n-expert 80 --workers 1 -o "$MODEL" >&2
fi
sync
SIZE=$(stat -c %s "$MODEL")
LIMIT_B=$(python3 -c "
import re
m = re.fullmatch(r'(\d+)([KMGT]?)', '$LIMIT')
print(int(m.group(1)) * {'': 1, 'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}[m.group(2)])")
log "model $SIZE bytes = $(python3 -c "print(round($SIZE/$LIMIT_B,2))")x the $LIMIT limit"

drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# The disk's O_DIRECT read bandwidth: dd's one sequential 4 MiB stream,
# and (before each run, as the disk is shared and its speed varies) reads
# the way staging-pread issues them: 4 workers, 4 MiB (one tensor's slice
# of an expert) at random offsets.
drop
BW1=$(dd if="$MODEL" of=/dev/null bs=4M iflag=direct count=512 2>&1 | awk '/copied/{print $(NF-1)" "$NF}')
bw() { drop; python3 "$(dirname "$0")/bw.py" "$MODEL" 4 $((4 << 20)) 4; }
log "O_DIRECT bandwidth: dd 1 stream $BW1"

# incg NAME CMD... runs CMD in a fresh cgroup with the limit, after dropping
# caches, and leaves peak/failcnt/wall/rc in $OUT/NAME.*
incg() {
	local name=$1
	shift
	[ -d "$CG" ] && rmdir "$CG"
	mkdir "$CG"
	echo "$LIMIT_B" >"$CG/memory.limit_in_bytes"
	bw >"$OUT/$name.bw"
	drop
	cat /proc/loadavg >"$OUT/$name.load"
	local s e rc=0
	s=$(date +%s.%N)
	timeout "$RUN_TIMEOUT" sh -c 'echo $$ >'"$CG"'/cgroup.procs; exec "$@"' sh "$@" >"$OUT/$name.stdout" 2>"$OUT/$name.stderr" || rc=$?
	e=$(date +%s.%N)
	echo "$rc" >"$OUT/$name.rc"
	python3 -c "print(round($e-$s,2))" >"$OUT/$name.wall"
	cat "$CG/memory.max_usage_in_bytes" >"$OUT/$name.peak"
	cat "$CG/memory.failcnt" >"$OUT/$name.failcnt"
	cat "$CG/memory.stat" >"$OUT/$name.memstat.full"
	grep -E '^(total_)?(cache|rss|shmem|mapped_file) ' "$CG/memory.stat" >"$OUT/$name.memstat" || true
	# Plugin processes of a run that timed out.
	for p in $(cat "$CG/cgroup.procs"); do kill -9 "$p" 2>/dev/null || true; done
	sleep 1
	rmdir "$CG"
	log "$name: rc=$rc wall=$(cat "$OUT/$name.wall")s peak=$(cat "$OUT/$name.peak") bw=$(cat "$OUT/$name.bw") GB/s"
}

for r in $RUNS; do
	IFS=: read -r s kn km la <<<"$r"
	extra=()
	name="k3-$s-$kn-$km"
	if [ "$la" = nolookahead ]; then
		extra=(--lookahead false)
		name+="-nolookahead"
	fi
	if [ -n "$DEPTH" ]; then
		extra+=(--prefetch-depth "$DEPTH")
		name+="-depth$DEPTH"
	fi
	K3_KERNELS__NAME=$kn K3_KERNELS__MODE=$km incg "$name" "$K3" eval -m "$MODEL" --tokens "$PROMPT" -n "$N" -t "$THREADS" \
		--profile auto --stager "$s" --stager-mode process --memory-budget "$BUDGET" --io-workers 4 "${extra[@]}"
done

if [ "$LLAMA" = 1 ]; then
	python3 -c "
import struct,sys
sys.stdout.buffer.write(b''.join(struct.pack('<i',int(t)) for t in '$PROMPT'.split(',')))" >"$OUT/prompt.bin"
	for v in $LLAMA_VARIANTS; do
		flags=""
		[ "$v" = norepack ] && flags=--no-repack
		for n in "$N" 1; do
			incg "llama-$v-n$n" sh -c "\"$K3REF\" greedy \"$MODEL\" $n --threads $THREADS $flags <\"$OUT/prompt.bin\""
		done
	done
fi

python3 "$(dirname "$0")/table.py" "$OUT" "$SIZE" "$LIMIT_B" "$BW1" "$N" | tee "$OUT/table.md"
