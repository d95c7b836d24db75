#!/usr/bin/env python3
"""Issue 12's analysis-cost target estimated for a GPU from stored timings.

The target: features + prediction + binning at most 0.3 SpMV-equivalents on
every matrix family with >= 1M nonzeros. The analysis runs on the host, the
SpMV on the device, so on a GPU the ratio is this host's analysis time over
the GPU's SpMV time. With no GPU here, this joins:
  - this host's analysis times, `spmv bench-overhead --csv` (features_ms,
    predict_ms, binning_ms per generated matrix and precision), and
  - a GPU campaign's `bench.csv` (every kernel and plan timed on the device;
    the fastest median that checked ok is taken, so the ratio is an upper
    estimate: the model's own plan is at best that fast),
on the generated matrices both hold (same generator, same nonzero count).
The GPU machine's host CPU is not this one (the H100's has 16 cores, where the
feature pass goes to more threads), so this is an estimate, not a measurement.

Usage: analysis_vs_gpu.py OVERHEAD_CSV CAMPAIGN_BENCH_CSV
  e.g. spmv bench-overhead EMPTY_DIR --families stencil2d,power_law,road_like,uniform_random \\
         --sizes 4M,16M --csv > /tmp/bo.csv
       bench/analysis_vs_gpu.py /tmp/bo.csv training-data/report/nvidia-h100-80gb-hbm3/bench.csv
Exit codes: 0 done; 1 no matrix in common; 2 bad usage.
"""

import csv
import sys

SIZES = {"K": 1_000, "M": 1_000_000}


def generated_key(name):
    """`gen:FAMILY:4M` (bench-overhead) and `gen:FAMILY:4000000` (campaign) alike."""
    parts = name.split(":")
    if len(parts) != 3 or parts[0] != "gen":
        return None
    size = parts[2]
    if size[-1:] in SIZES:
        n = int(float(size[:-1]) * SIZES[size[-1]])
    else:
        n = int(size)
    return parts[1], n


def best_device_ms(path):
    best = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            key = generated_key(r["matrix"])
            if key is None or r.get("ok") != "true" or r["kernel"].startswith("cpu"):
                continue
            k = (key, r["precision"])
            best[k] = min(best.get(k, float("inf")), float(r["median_ms"]))
    return best


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    device = best_device_ms(argv[2])
    rows = []
    with open(argv[1], newline="") as f:
        for r in csv.DictReader(f):
            key = generated_key(r["matrix"])
            k = (key, r["precision"])
            if key is None or k not in device:
                continue
            host = float(r["features_ms"]) + float(r["predict_ms"]) + float(r["binning_ms"])
            rows.append((r["matrix"], r["precision"], host, device[k], host / device[k]))
    if not rows:
        print("no generated matrix is in both files", file=sys.stderr)
        return 1
    print("matrix,precision,host_analysis_ms,device_best_ms,spmv_equivalents")
    for m, p, h, d, q in rows:
        print(f"{m},{p},{h:.4f},{d:.4f},{q:.2f}")
    worst = max(rows, key=lambda r: r[4])
    print(f"# worst: {worst[0]} {worst[1]} at {worst[4]:.2f} SpMV-equivalents (target <= 0.3)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
