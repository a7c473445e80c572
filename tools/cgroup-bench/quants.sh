#!/usr/bin/env bash
# Issue 21's oversize check: the same kimi-k3 shapes written with routed
# experts in Q2_K and in an IQ mix (default iq2_xxs-moe: gate/up IQ2_XXS, down
# IQ2_XS), each decoded inside a memory cgroup RATIO times smaller than the
# file with --profile auto. Decode from storage is bound by bytes read per
# token, so the IQ file's tok/s should rise by about the bytes it saves.
# Prints one row per type: file size, limit, cgroup peak, MB read per decode
# token, hit rate, wait share, decode tok/s, the disk's measured O_DIRECT
# bandwidth before the run, and the storage bound (bandwidth / bytes per token).
#
#   sudo tools/cgroup-bench/quants.sh
#   TYPES="q2_k iq2_xxs-moe iq1_m-moe" N=16 KEEP=1 tools/cgroup-bench/quants.sh
#
# Needs root (cgroup v1 memory at /sys/fs/cgroup/memory), Go, python3 and ~4 GB under DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."

DIR=${DIR:-/var/tmp/k3-quantbench}
TYPES=${TYPES:-"q2_k iq2_xxs-moe"}
N=${N:-16}
THREADS=${THREADS:-2}
RATIO=${RATIO:-5} # Q2_K file size / cgroup limit (the same limit for every type)
KEEP=${KEEP:-0}
SHAPE=${SHAPE:-"--preset k3 --n-layer 4 --n-dense 1 --n-head 8 --n-vocab 32768 --n-ff 4096 --n-expert 192"}
CG=/sys/fs/cgroup/memory/k3-quantbench
PROMPT=${PROMPT:-"1,450,1201,77,3012,9,640,18,2048,333,1000,7"}

mkdir -p "$DIR"
K3="$DIR/k3"
go build -o "$K3" ./cmd/k3

# shellcheck source=lib.sh
. tools/cgroup-bench/lib.sh

limit=
echo "| routed experts | file | limit | cgroup peak | MB read/decode token | hit rate | wait share | decode tok/s | disk GB/s (O_DIRECT 4 MiB, 4 threads) | storage bound tok/s | load |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for typ in $TYPES; do
	m="$DIR/$typ.gguf"
	# shellcheck disable=SC2086
	[ -f "$m" ] || "$K3" synth $SHAPE --type "$typ" -o "$m" >"$DIR/$typ.synth.log"
	size=$(stat -c %s "$m")
	[ -n "$limit" ] || limit=$((size / RATIO))
	out="$DIR/$typ"
	drop
	bw=$(python3 tools/cgroup-bench/bw.py "$m" 4 4194304 3 2>/dev/null || echo 0)
	load=$(cut -d' ' -f1 /proc/loadavg)
	rc=0
	incg "$limit" "$out.cg" "$K3" eval -m "$m" --tokens "$PROMPT" -n "$N" -t "$THREADS" --profile auto || rc=$?
	python3 - "$typ" "$size" "$limit" "$(cat "$out.cg.peak")" "$out.cg.stderr" "$out.cg.stdout" "$rc" "$bw" "$load" <<'EOF'
import json, re, sys
typ, size, limit, peak, err, outp, rc, bw, load = sys.argv[1:]
st = {}
for line in open(outp).readlines() + open(err).readlines():
    if line.startswith('{"stager_stats"'):
        st = json.loads(line)["stager_stats"]
m = re.findall(r"decode_tok_s=([0-9.]+)", open(err).read())
rate = f"{float(m[-1]):.2f}" if m else "?"
g = lambda b: f"{int(b) / 2**30:.2f} GiB"
bpt = st.get("decode_bytes_read_per_token", 0) if st else 0
cols = [f"{bpt / 1e6:.1f}", f"{st['hit_rate']:.2f}", f"{st['decode_wait_share']:.2f}"] if st else ["?"] * 3
bound = f"{float(bw) * 1e9 / bpt:.2f}" if bpt and float(bw) > 0 else "?"
note = "" if rc == "0" else f" (exit {rc})"
print("| " + " | ".join([typ + note, g(size), g(limit), g(peak)] + cols + [rate, f"{float(bw):.2f}", bound, load]) + " |")
EOF
	[ "$KEEP" = 1 ] || rm -f "$m"
done
