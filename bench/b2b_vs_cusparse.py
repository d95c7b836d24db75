#!/usr/bin/env python3
"""Ours against cuSPARSE, both timed by method (b): 100 calls back to back.

Joins a campaign's `bench.csv` (`spmv bench --csv`: `b2b_ms`, the plan enqueued
N times with one finish, wall time / N) with its `cusparse.csv`
(`bench/cusparse_bench.py`: `ms_b2b`, a CUDA graph of 100 calls replayed, the
faster of cuSPARSE's two CSR algorithms). For each matrix and precision it
takes our fastest single kernel by (b), and prints the ratio cuSPARSE / ours
(above 1: we are faster), with the (a) figures beside it: one call's device
time (ours: OpenCL profiled spans; cuSPARSE: one call between CUDA events).
Geomeans over the real matrices with >= --min-nnz nonzeros, and per row.

  bench/b2b_vs_cusparse.py BENCH_CSV CUSPARSE_CSV [--min-nnz 100000] [--csv]

Exit 1 when no matrix is in both files.
"""

import argparse
import csv
import math
import sys


def fastest_by_b2b(bench_rows, plans=False):
    """{(matrix, precision): (b2b_ms, kernel, a_ms, nnz)} over single kernels
    (no CPU line; binned plans too with `plans`) that were timed back to back
    and were right."""
    best = {}
    for r in bench_rows:
        k = r["kernel"]
        if k == "cpu_parallel" or (k.startswith("plan_") and not plans):
            continue
        if not r.get("b2b_ms") or r["ok"] != "true":
            continue
        key = (r["matrix"], r["precision"])
        b = float(r["b2b_ms"])
        if key not in best or b < best[key][0]:
            best[key] = (b, k, float(r["median_ms"]), int(r["nnz"]))
    return best


def join(bench_rows, cusparse_rows):
    """Rows (matrix, precision, nnz, ours_b, kernel, ours_a, cus_b, alg, cus_a)
    for every matrix and precision in both files. Generated matrices are named
    `gen:FAMILY:NNZ` by spmv bench and `gen:FAMILY:NNZ` by cusparse_bench."""
    ours = fastest_by_b2b(bench_rows)
    out = []
    for c in cusparse_rows:
        if not c.get("ms_b2b"):
            continue
        key = (c["matrix"], c["precision"])
        if key not in ours:
            continue
        b, kern, a, nnz = ours[key]
        out.append((key[0], key[1], nnz, b, kern, a, float(c["ms_b2b"]), c["best_alg"],
                    float(c["ms_call"])))
    return sorted(out)


def geomean(v):
    v = [x for x in v if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench")
    ap.add_argument("cusparse")
    ap.add_argument("--min-nnz", type=int, default=100000)
    ap.add_argument("--csv", action="store_true", help="the joined rows as CSV")
    a = ap.parse_args(argv)
    with open(a.bench) as f:
        bench = list(csv.DictReader(f))
    with open(a.cusparse) as f:
        cus = list(csv.DictReader(f))
    rows = join(bench, cus)
    if not rows:
        print("b2b_vs_cusparse: no matrix in both files", file=sys.stderr)
        return 1
    if a.csv:
        w = csv.writer(sys.stdout)
        w.writerow(["matrix", "precision", "nnz", "ours_b2b_ms", "kernel", "ours_call_ms",
                    "cusparse_b2b_ms", "cusparse_alg", "cusparse_call_ms", "speedup_b"])
        for r in rows:
            w.writerow(list(r) + [f"{r[6] / r[3]:.3f}"])
        return 0
    print("| matrix | prec | nnz | ours (b) ms | kernel | cuSPARSE (b) ms | alg | cuSPARSE/ours (b) | ours (a) ms | cuSPARSE (a) ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m, p, nnz, b, k, oa, cb, alg, ca in rows:
        print(f"| {m} | {p} | {nnz} | {b:.4f} | {k} | {cb:.4f} | {alg} | {cb / b:.2f} | {oa:.4f} | {ca:.4f} |")
    for p in ("f32", "f64"):
        real = [r for r in rows if r[1] == p and not r[0].startswith("gen:") and r[2] >= a.min_nnz]
        if real:
            ratios = [r[6] / r[3] for r in real]
            print(f"{p}: real matrices >= {a.min_nnz} nonzeros: {len(real)}, cuSPARSE/ours by (b) "
                  f"geomean {geomean(ratios):.2f}, worst {min(ratios):.2f}")
    for p, n, g, w, wins in plans_pay(bench, a.min_nnz):
        print(f"{p}: binned plans (best of per-bin, grouped, fused) against the best single kernel "
              f"by (b) on {n} real matrices >= {a.min_nnz}: geomean {g:.3f}, worst {w:.3f}, "
              f"{wins} where a plan is faster")
    return 0


def plans_pay(bench_rows, min_nnz):
    """Per precision: (precision, matrices, geomean and worst of best single /
    best of all by (b), matrices where a binned plan is the fastest), over the
    real matrices with >= min_nnz nonzeros that have a plan line."""
    single = fastest_by_b2b(bench_rows)
    every = fastest_by_b2b(bench_rows, plans=True)
    out = []
    for p in ("f32", "f64"):
        keys = [k for k in every if k[1] == p and k in single and not k[0].startswith("gen:")
                and every[k][3] >= min_nnz and any(
                    r["matrix"] == k[0] and r["precision"] == p and r["kernel"].startswith("plan_")
                    for r in bench_rows)]
        if not keys:
            continue
        ratios = [single[k][0] / every[k][0] for k in keys]
        wins = sum(every[k][1].startswith("plan_") for k in keys)
        out.append((p, len(keys), geomean(ratios), min(ratios), wins))
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
