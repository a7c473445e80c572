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
    ggml, ggml_rp, ggml_med, repacked = {}, {}, {}, {}
    for path in rounds(out + "/ggml-matvec-%s-[0-9]*.json" % shape):
        for r in json.load(open(path))["results"]:
            t = r["type"].upper()
            ggml[t] = max(ggml.get(t, 0), r["gbps_mean"])
            ggml_med[t] = max(ggml_med.get(t, 0), r["gbps_median"])
    for path in rounds(out + "/ggml-matvec-repack-%s-[0-9]*.json" % shape):
        for r in json.load(open(path))["results"]:
            t = r["type"].upper()
            ggml_rp[t] = max(ggml_rp.get(t, 0), r["gbps_mean"])
            repacked[t] = r["repacked"]
    k3 = {}  # (type, "pkg:level") -> GB/s
    line = re.compile(r"BenchmarkSideBySide/(\w+)/(\w+)/t\d+-\d+\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) MB/s")
    for pkg in ("avx2", "avx512"):
        for path in rounds(out + "/k3-matvec-%s-%s-[0-9]*.txt" % (shape, pkg)):
            for m in map(line.match, open(path)):
                if m:
                    key = (m.group(1).upper(), pkg + ":" + m.group(2))
                    k3[key] = max(k3.get(key, 0), float(m.group(3)) / 1000)
    levels = sorted({lv for _, lv in k3}, key=lambda s: (s.split(":")[0], s))
    head = ["type", "ggml", "ggml repack", "ggml median"] + levels + ["%s/ggml" % auto, "%s/ggml repack" % auto, "best k3/best ggml"]
    rows = []
    div = lambda a, b: "%.2fx" % (a / b) if a and b else "-"
    for t in ggml:
        best = max((k3.get((t, lv), 0) for lv in levels), default=0)
        rp = ggml_rp.get(t, 0)
        a = k3.get((t, auto), 0)
        cells = [t, "%.1f" % ggml[t], ("%.1f" % rp) + ("" if repacked.get(t) else " (=)"), "%.1f" % ggml_med[t]]
        cells += ["%.1f" % k3[(t, lv)] if (t, lv) in k3 else "-" for lv in levels]
        cells += [div(a, ggml[t]), div(a, rp), div(best, max(ggml[t], rp))]
        rows.append(cells)
    print("GB/s of weights (mean time of the best round); k3 level %s is what k3 runs on this CPU;" % auto)
    print("ggml repack: weights in CPU_REPACK as llama.cpp loads them by default; (=): no repacked layout for the type, a second sample;")
    print("ggml median: from the median time instead of the mean (go test -bench reports only means), for scale")
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
