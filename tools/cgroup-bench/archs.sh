#!/usr/bin/env bash
# For each architecture k3 reads, a synthetic Q2_K file about 3x larger than a
# memory cgroup's limit decodes inside that cgroup with --profile auto, and its
# greedy tokens are compared with the same file decoded without a budget
# (issue 20). Prints one table row per architecture: file size, limit, peak of
# the cgroup (page cache included), bytes read per decode token, hit rate,
# decode tok/s and whether the tokens are identical.
#
#   sudo tools/cgroup-bench/archs.sh                  # all three
#   ARCHS="qwen3moe" N=8 KEEP=1 tools/cgroup-bench/archs.sh
#
# Needs root (cgroup v1 memory at /sys/fs/cgroup/memory), Go and ~6 GB under DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."

DIR=${DIR:-/var/tmp/k3-archbench}
ARCHS=${ARCHS:-"kimi-k3 deepseek2 qwen3moe"}
N=${N:-16}
THREADS=${THREADS:-2}
RATIO=${RATIO:-3} # file size / cgroup limit
KEEP=${KEEP:-0}
CG=/sys/fs/cgroup/memory/k3-archbench
PROMPT=${PROMPT:-"1,450,1201,77,3012,9,640,18,2048,333,1000,7"}

mkdir -p "$DIR"
K3="$DIR/k3"
go build -o "$K3" ./cmd/k3

# synth_args ARCH: a file of ~1.5-2 GB at the architecture's real width
# (hidden size, expert FFN width, heads) with fewer layers and experts.
synth_args() {
	case $1 in
	kimi-k3) echo "--preset k3 --n-layer 4 --n-dense 1 --n-head 8 --n-vocab 32768 --n-ff 4096 --n-expert 64" ;;
	deepseek2) echo "--arch deepseek2 --preset kimi-k2 --n-layer 3 --n-dense 1 --n-head 16 --n-vocab 32768 --n-expert 64" ;;
	qwen3moe) echo "--arch qwen3moe --preset qwen3-235b-a22b --n-layer 3 --n-vocab 32768 --n-expert 96" ;;
	esac
}

# shellcheck source=lib.sh
. tools/cgroup-bench/lib.sh

tokens() { grep -oE '^\{"greedy":.*' "$1" | tail -1; }

echo "| arch | file | limit | budget (mode line) | cgroup peak | MB read/decode token | hit rate | wait share | decode tok/s (cgroup, SIMD kernels) | decode tok/s (no budget, reference kernels) | tokens identical |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for arch in $ARCHS; do
	m="$DIR/$arch.gguf"
	[ -f "$m" ] || "$K3" synth $(synth_args "$arch") --type q2_k -o "$m" >"$DIR/$arch.synth.log"
	size=$(stat -c %s "$m")
	limit=$((size / RATIO))
	out="$DIR/$arch"
	drop
	"$K3" eval -m "$m" --tokens "$PROMPT" -n "$N" -t "$THREADS" >"$out.free.stdout" 2>"$out.free.stderr"
	rc=0
	incg "$limit" "$out.cg" "$K3" eval -m "$m" --tokens "$PROMPT" -n "$N" -t "$THREADS" --profile auto || rc=$?
	same=no
	if [ $rc = 0 ] && [ -n "$(tokens "$out.free.stdout")" ] && [ "$(tokens "$out.free.stdout")" = "$(tokens "$out.cg.stdout")" ]; then
		same=yes
	fi
	python3 - "$arch" "$size" "$limit" "$(cat "$out.cg.peak")" "$out.cg.stderr" "$out.cg.stdout" "$same" "$rc" <<'EOF'
import json, re, sys
arch, size, limit, peak, err, outp, same, rc = sys.argv[1:]
free = err.replace(".cg.", ".free.")
st = {}
for line in open(outp).readlines() + open(err).readlines():
    if line.startswith('{"stager_stats"'):
        st = json.loads(line)["stager_stats"]
def rate(f):
    m = re.findall(r"decode_tok_s=([0-9.]+)", open(f).read())
    return f"{float(m[-1]):.2f}" if m else "?"
mode = re.search(r"^k3: .*?budget=(\S+)", open(err).read(), re.M)
g = lambda b: f"{int(b) / 2**30:.2f} GiB"
cols = [f"{st['decode_bytes_read_per_token'] / 1e6:.1f}", f"{st['hit_rate']:.2f}", f"{st['decode_wait_share']:.2f}"] if st else ["?"] * 3
note = "" if rc == "0" else f" (exit {rc})"
print("| " + " | ".join([arch, g(size), g(limit), mode.group(1) if mode else "?", g(peak)] + cols + [rate(err), rate(free), same + note]) + " |")
EOF
	[ "$KEEP" = 1 ] || rm -f "$m"
done
