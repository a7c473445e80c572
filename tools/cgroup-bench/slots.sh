#!/usr/bin/env bash
# k3 serve with N slots inside a memory cgroup on a model larger than the
# cgroup's limit (page cache included): N concurrent greedy clients, then
# the same prompts one at a time on a one-slot server in the same cgroup.
# Prints the mode lines, the cgroup's peak against the limit, and whether
# every client's tokens equal its single-slot run. Needs root and cgroup v1
# memory at /sys/fs/cgroup/memory; MODEL is written as run.sh writes it
# when missing. See README.md.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${DIR:-/var/tmp/k3-cgbench}
MODEL=${MODEL:-$DIR/k3big.gguf}
LIMIT=${LIMIT:-2G}
BUDGET=${BUDGET:-1900M}
NP=${NP:-4}
N=${N:-8}            # tokens per client
THREADS=${THREADS:-2}
STAGER=${STAGER:-pread}
PORT=${PORT:-18391}
K3=${K3:-$DIR/k3}
CG=/sys/fs/cgroup/memory/k3-slots
OUT=${OUT:-$DIR/slots}
mkdir -p "$DIR" "$OUT"

log() { echo "[slots $(date -u +%H:%M:%S)] $*" >&2; }
[ -x "$K3" ] || (cd "$REPO" && CGO_ENABLED=0 go build -o "$K3" ./cmd/k3)
if [ ! -f "$MODEL" ]; then
	"$K3" synth --preset k3 --type q2_k --n-layer 8 --n-dense 1 --n-head 32 \
		--n-vocab 32768 --n-ff 4096 --n-expert 80 --workers 1 -o "$MODEL" >&2
fi
LIMIT_B=$(numfmt --from=iec "$LIMIT")
SIZE=$(stat -c %s "$MODEL")
log "model $SIZE bytes, $(python3 -c "print(round($SIZE/$LIMIT_B,2))")x the $LIMIT limit"

cleanup() {
	[ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
	if [ -d "$CG" ]; then
		for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
		sleep 1
		rmdir "$CG" 2>/dev/null || true
	fi
}
trap cleanup EXIT

prompt() { echo "{\"prompt\":\"Client $1 asks about something entirely its own.\",\"max_tokens\":$N,\"temperature\":0,\"ignore_eos\":true,\"return_tokens\":true}"; }

# serve NAME NP: k3 serve in a fresh cgroup; runs the clients ($NP at once
# when NP > 1, else one after another) and records the peak.
serve() {
	local name=$1 np=$2
	cleanup
	mkdir "$CG"
	echo "$LIMIT_B" >"$CG/memory.limit_in_bytes"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	K3_STAGER__NAME=$STAGER sh -c 'echo $$ >'"$CG"'/cgroup.procs; exec "$@"' sh "$K3" serve -m "$MODEL" --port "$PORT" -t "$THREADS" -c 1024 \
		-np "$np" --profile auto --memory-budget "$BUDGET" >"$OUT/$name.log" 2>&1 &
	pid=$!
	for _ in $(seq 600); do
		curl -fs "http://127.0.0.1:$PORT/health" 2>/dev/null | grep -q '"ok"' && break
		kill -0 "$pid" 2>/dev/null || { cat "$OUT/$name.log" >&2; exit 1; }
		sleep 0.5
	done
	local s e
	s=$(date +%s.%N)
	local clients=()
	for i in $(seq 0 $((NP - 1))); do
		if [ "$np" -gt 1 ]; then
			curl -fs -H "Content-Type: application/json" "http://127.0.0.1:$PORT/completion" -d "$(prompt "$i")" >"$OUT/$name.$i.json" &
			clients+=($!)
		else
			curl -fs -H "Content-Type: application/json" "http://127.0.0.1:$PORT/completion" -d "$(prompt "$i")" >"$OUT/$name.$i.json"
		fi
	done
	for c in "${clients[@]}"; do wait "$c"; done
	e=$(date +%s.%N)
	python3 -c "print(round($e-$s,2))" >"$OUT/$name.wall"
	cat "$CG/memory.max_usage_in_bytes" >"$OUT/$name.peak"
	cat "$CG/memory.failcnt" >"$OUT/$name.failcnt"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=
	log "$name: $(grep -m1 -E 'profile|budget' "$OUT/$name.log" || true)"
	log "$name: wall $(cat "$OUT/$name.wall")s, peak $(cat "$OUT/$name.peak") of $LIMIT_B ($(python3 -c "print(round($(cat "$OUT/$name.peak")/$LIMIT_B*100,1))")%), failcnt $(cat "$OUT/$name.failcnt")"
}

serve "np$NP" "$NP"
serve np1 1
same=0
for i in $(seq 0 $((NP - 1))); do
	a=$(python3 -c "import json;print(json.load(open('$OUT/np$NP.$i.json'))['tokens'])")
	b=$(python3 -c "import json;print(json.load(open('$OUT/np1.$i.json'))['tokens'])")
	if [ "$a" = "$b" ]; then same=$((same + 1)); else log "client $i: -np $NP $a, -np 1 $b"; fi
done
log "$same of $NP clients' tokens identical to the one-slot run"
