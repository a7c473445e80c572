#!/usr/bin/env python3
"""Summarises run.sh's results directory as a markdown table.

usage: table.py OUT_DIR MODEL_BYTES LIMIT_BYTES BW1 N
BW1 is dd's one-stream figure ("1.2 GB/s"); each run's NAME.bw the
bandwidth bw.py measured just before it.
"""
import json
import os
import re
import sys

out, size, limit, bw1, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])


def read(name, ext, default=""):
    p = os.path.join(out, f"{name}.{ext}")
    if not os.path.exists(p):
        return default
    with open(p) as f:
        return f.read().strip()


def k3_row(name):
    if not read(name, "rc"):
        return None
    err, stdout = read(name, "stderr"), read(name, "stdout")
    greedy = []
    for line in stdout.splitlines():
        if line.startswith('{"greedy"'):
            greedy = json.loads(line)["greedy"]
    stats = {}
    for line in err.splitlines():
        if line.startswith('{"stager_stats"'):
            stats = json.loads(line)["stager_stats"]
    m = re.search(r"decode_tok_s=([0-9.e+-]+)", err)
    tok_s = float(m.group(1)) if m and read(name, "rc") == "0" else None
    bpt = stats.get("decode_bytes_read_per_token", 0.0)
    bw = float(read(name, "bw", "0"))
    return {
        "run": "k3 staging-{} (process), kernels {} {}{}".format(*(name.split("-")[1:4]), ", no lookahead" if name.endswith("nolookahead") else ""),
        "rc": read(name, "rc"),
        "tokens": len(greedy),
        "greedy": greedy,
        "peak": int(read(name, "peak", "0")),
        "failcnt": read(name, "failcnt"),
        "wall": float(read(name, "wall", "0")),
        "tok_s": tok_s,
        "hit": stats.get("hit_rate"),
        "bpt": bpt,
        "wait": stats.get("decode_wait_share"),
        "acq": stats.get("decode_acquire_share"),
        "prec": stats.get("lookahead_precision"),
        "bw": bw,
        "bound": bw * 1e9 / bpt if bpt else None,
        "rate": stats["decode_bytes_read"] / stats["decode_s"] / 1e9 if stats.get("decode_s") else None,
        "load": read(name, "load").split(" ")[0],
        "mode": stats.get("stager", ""),
    }


def llama_row(v):
    a, b = f"llama-{v}-n{n}", f"llama-{v}-n1"
    if not read(a, "rc"):
        return None
    toks = []
    for line in read(a, "stdout").splitlines():
        if line.startswith("{"):
            toks = json.loads(line).get("tokens", [])
    wa, wb = float(read(a, "wall", "0")), float(read(b, "wall", "0"))
    ok = read(a, "rc") == "0" and read(b, "rc") == "0"
    return {
        "run": f"llama.cpp k3ref greedy ({v})",
        "rc": read(a, "rc"),
        "tokens": len(toks),
        "greedy": toks,
        "peak": int(read(a, "peak", "0")),
        "failcnt": read(a, "failcnt"),
        "wall": wa,
        "tok_s": (n - 1) / (wa - wb) if ok and wa > wb else None,
        "hit": None, "bpt": None, "wait": None, "acq": None, "prec": None, "bound": None, "rate": None,
        "bw": float(read(a, "bw", "0")),
        "load": read(a, "load").split(" ")[0],
        "mode": f"decode tok/s = {n - 1} / (wall(n={n}) {wa}s - wall(n=1) {wb}s); exit {read(a, 'rc')} / {read(b, 'rc')} (137: killed by the cgroup's OOM killer)",
    }


def f(v, fmt):
    return "-" if v is None else format(v, fmt)


names = sorted(f[:-3] for f in os.listdir(out) if f.startswith("k3-") and f.endswith(".rc"))
lnames = sorted({f.split("-")[1] for f in os.listdir(out) if f.startswith("llama-") and f.endswith(".rc")})
rows = [r for r in [k3_row(nm) for nm in names] + [llama_row(v) for v in lnames] if r]
print(f"model {size / 1e9:.2f} GB, cgroup limit {limit / 2**30:.2f} GiB ({size / limit:.2f}x); "
      f"O_DIRECT read, dd one 4 MiB stream: {bw1}\n")
print("| run | exit | tokens | peak cgroup MiB (limit %d) | limit hits (failcnt) | wall s | decode tok/s | hit rate | bytes read/token MB | wait-on-storage share | acquire share | stager read GB/s (decode) | O_DIRECT GB/s (4x4MiB random) | storage-bound tok/s | lookahead precision | load avg |" % (limit >> 20))
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['run']} | {r['rc']} | {r['tokens']} | {r['peak'] / 2**20:.0f} | {r['failcnt']} | {r['wall']:.1f} | {f(r['tok_s'], '.3f')} | "
          f"{f(r['hit'], '.3f')} | {f(r['bpt'] and r['bpt'] / 1e6, '.1f')} | {f(r['wait'], '.3f')} | {f(r['acq'], '.3f')} | "
          f"{f(r['rate'], '.2f')} | {f(r['bw'], '.2f')} | {f(r['bound'], '.2f')} | {f(r['prec'], '.3f')} | {r['load']} |")
print()
for r in rows:
    print(f"- {r['run']}: {r['mode']}")
if len(rows) > 1:
    done = [r for r in rows if r["rc"] == "0"]
    same = all(r["greedy"] == done[0]["greedy"] for r in done)
    print(f"- greedy tokens identical across completed runs: {same}")
    for r in rows:
        print(f"  - {r['run']}: {r['greedy'][:16]}...")
