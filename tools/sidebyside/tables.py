#!/usr/bin/env python3
"""Ratio tables for run.sh: tables.py matvec OUT LEVEL SHAPE | tables.py e2e OUT TYPE...

Every figure is the best round (matvec: highest mean throughput of a
round) or the mean over rounds (e2e); ratios are k3 / llama.cpp, > 1 means
k3 is faster.
"""
import glob
import json
import re
import statistics
import sys


def rounds(pattern):
    return sorted(glob.glob(pattern), key=lambda p: int(re.search(r"-(\d+)\.\w+$", p).group(1)))


def matvec(out, auto, shape):
    # (type, source) -> [mean GB/s, median GB/s], best round of each
    best = {}

    def keep(t, src, mean, med):
        old = best.get((t, src), [0, 0])
        best[(t, src)] = [max(old[0], mean), max(old[1], med)]

    repacked = {}
    for src, pat in (("ggml", "ggml-matvec-%s-[0-9]*.json"), ("repack", "ggml-matvec-repack-%s-[0-9]*.json")):
        for path in rounds(out + "/" + pat % shape):
            for r in json.load(open(path))["results"]:
                t = r["type"].upper()
                keep(t, src, r["gbps_mean"], r["gbps_median"])
                if src == "repack":
                    repacked[t] = r["repacked"]
    line = re.compile(r"BenchmarkSideBySide/([\w-]+)/(\w+)/t\d+-\d+\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) MB/s"
                      r"(?:.*?\s([\d.]+) median-GB/s)?")  # other metrics (fallbacks/row) may come first
    levels = set()
    for pkg in ("avx2", "avx512"):
        for path in rounds(out + "/k3-matvec-%s-%s-[0-9]*.txt" % (shape, pkg)):
            for m in map(line.match, open(path)):
                if m:
                    lv = pkg + ":" + m.group(2)
                    levels.add(lv)
                    keep(m.group(1).upper(), lv, float(m.group(3)) / 1000, float(m.group(4) or 0))
    types = [t for (t, src) in best if src == "ggml"]
    head = ["type", "ggml mean", "ggml median", "repack mean", "repack median", "k3 mean", "k3 median",
            "k3/ggml mean", "k3/ggml median", "k3/repack median", "best k3/best ggml median"]
    rows = []
    div = lambda a, b: "%.2fx" % (a / b) if a and b else "-"
    f = lambda v: "%.1f" % v if v else "-"
    # k3's float mode fast (F32-FAST, F16-FAST, BF16-FAST) against the same ggml type
    kt = [(t, t) for t in types] + [(t, t + "-FAST") for t in types if any(s == t + "-FAST" for (s, _) in best)]
    for t, name in kt:
        g, rp, k = best[(t, "ggml")], best.get((t, "repack"), [0, 0]), best.get((name, auto), [0, 0])
        kbest = max((best.get((name, lv), [0, 0])[1] for lv in levels), default=0)
        mark = "" if repacked.get(t) else " (=)"
        rows.append([name.replace("-FAST", " fast"), f(g[0]), f(g[1]), f(rp[0]) + mark, f(rp[1]) + mark, f(k[0]), f(k[1]),
                     div(k[0], g[0]), div(k[1], g[1]), div(k[1], rp[1]), div(kbest, max(g[1], rp[1]))])
    print("GB/s of weights, best round of each; k3 = level %s, what k3 runs on this CPU (other levels: raw files);" % auto)
    print("repack: weights in CPU_REPACK as llama.cpp loads them by default ((=): no repacked layout for the type,")
    print("a second sample); median: of the per-call times, robust to a shared machine's scheduling stalls")
    table(head, rows)


def e2e(out, types):
    head = ["model", "phase", "k3 tok/s", "llama tok/s", "k3/llama", "llama no-repack", "k3/no-repack", "rounds"]
    rows, notes = [], []
    for typ in types:
        k3 = [json.load(open(p)) for p in rounds(out + "/k3-bench-%s-[0-9]*.json" % typ)]
        ll = [json.load(open(p)) for p in rounds(out + "/llama-bench-%s-[0-9]*.json" % typ)]
        nr = [json.load(open(p)) for p in rounds(out + "/llama-bench-norepack-%s-[0-9]*.json" % typ)]
        if not k3 or not ll:
            continue
        for phase in ("prefill_tok_s", "decode_tok_s"):
            a = [r[phase]["mean"] for r in k3]
            b = [r[phase]["mean"] for r in ll]
            c = [r[phase]["mean"] for r in nr]
            rows.append([typ, phase.split("_")[0], ms(a), ms(b), ratio(a, b), ms(c), ratio(a, c), str(len(a))])
        m = k3[0]
        notes.append("%s: %.2f GiB file; k3 %s, peak RSS %.2f GiB; llama.cpp %s, load %.1f s (repack) / %.1f s" % (
            typ, m["model"]["bytes"] / 2**30, m["mode"]["kernels"], m["memory"]["vm_hwm_bytes"] / 2**30,
            ll[0]["cpu_variant"], statistics.mean(r["load_s"] for r in ll),
            statistics.mean(r["load_s"] for r in nr) if nr else float("nan")))
    print("tok/s mean ± sd over rounds; ratio: mean of the rounds' paired ratios (k3 and llama.cpp ran back to back)")
    table(head, rows)
    for n in notes:
        print(n)


def ms(v):
    if not v:
        return "-"
    return "%.2f ± %.2f" % (statistics.mean(v), statistics.stdev(v) if len(v) > 1 else 0)


def ratio(a, b):
    pairs = [x / y for x, y in zip(a, b) if y > 0]
    return "%.2fx" % statistics.mean(pairs) if pairs else "-"


def table(head, rows):
    w = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    for r in [head, ["-" * x for x in w]] + rows:
        print("| " + " | ".join(str(c).ljust(x) for c, x in zip(r, w)) + " |")


if __name__ == "__main__":
    if sys.argv[1] == "matvec":
        matvec(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        e2e(sys.argv[2], sys.argv[3:])
