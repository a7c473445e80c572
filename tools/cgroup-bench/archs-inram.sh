#!/usr/bin/env bash
# k3 bench vs llama.cpp (k3ref bench: llama-bench's loop, the native SIMD variant, repacked
# weights) in RAM on the files archs.sh wrote (KEEP=1), ROUNDS alternating rounds (default 2), 2 threads;
# ARCHS names the files (DIR/NAME.gguf: any file, e.g. quants.sh's q2_k and iq2_xxs-moe);
# P and N set the prompt and generated tokens (default 64 and 32).
# Needs bin/k3 and tools/parity (bash .ci/setup-parity.sh).
cd "$(dirname "$0")/../.."
K3=${K3:-bin/k3}; REF=${REF:-tools/parity/build/k3ref}; D=${DIR:-/var/tmp/k3-archbench}; O=${OUT:-/tmp/archbench}; mkdir -p $O
for a in ${ARCHS:-qwen3moe deepseek2 kimi-k3}; do
  m=$D/$a.gguf; cat $m >/dev/null
  for r in $(seq ${ROUNDS:-2}); do
    echo "$a round $r load $(cut -d' ' -f1 /proc/loadavg)"
    $K3 bench -m $m -p ${P:-64} -n ${N:-32} -t 2 -r 1 --seed $r --json --kernels auto --kernels-mode inprocess > $O/k3-$a-$r.json 2>$O/k3-$a-$r.log
    $REF bench $m -p ${P:-64} -n ${N:-32} --threads 2 --reps 1 --seed $r > $O/ll-$a-$r.json 2>$O/ll-$a-$r.log
  done
done
O=$O A="${ARCHS:-qwen3moe deepseek2 kimi-k3}" python3 - <<'PY'
import json,glob,os
O=os.environ["O"]
for a in os.environ["A"].split():
    row=[a]
    for ph in ("prefill_tok_s","decode_tok_s"):
        k=[json.load(open(f))[ph]["mean"] if isinstance(json.load(open(f))[ph],dict) else json.load(open(f))[ph] for f in sorted(glob.glob(f"{O}/k3-{a}-*.json"))]
        l=[json.load(open(f))[ph]["mean"] if isinstance(json.load(open(f))[ph],dict) else json.load(open(f))[ph] for f in sorted(glob.glob(f"{O}/ll-{a}-*.json"))]
        if not k or not l: continue
        row.append(f"{ph}: k3 {max(k):.2f} llama {max(l):.2f} ratio(best) {max(k)/max(l):.2f}x  per-round {[round(x/y,2) for x,y in zip(k,l)]}")
    print(" | ".join(row))
PY
