#!/usr/bin/env python3
"""The first call of a matrix never seen: inline /spmv planned for one call against the same call planned for many.

For each Matrix Market file, sends the matrix and x inline in one binary CSR
body (application/vnd.spmv-select.csr, x after the values) to a running
spmv-select server, --reps times each with ?expected_calls=1 (the inline
default: the plan for one call, binning only when it pays) and with
?expected_calls=--many (the plan an upload gets), alternating, and prints the
medians of the server's split (timings_ms of the answer):
  setup   planning, upload and preparation of the launches (the analysis);
  kernel  OpenCL profiling of the SpMV kernels;
  device  x upload + kernels + y download, wall clock;
  read    receiving and parsing the body;
  server  the whole request inside the server;
and the plan chosen (planning.chosen, its scheme, launches). Every y is
checked against scipy.

Usage: first_call.py --url http://127.0.0.1:PORT [--precision f64] [--reps 7] [--many 1000] [FILES...]
(default files: a few of ../shared/matrices). Exit codes: 0 done; 1 a request
failed or an answer was wrong; 2 bad usage.
"""

import argparse
import gzip
import http.client
import json
import os
import statistics
import sys
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python", "src"))
from spmv_select import csrbin  # noqa: E402  (the client's encoder of the binary CSR body)

DEFAULT = [
    "HB__bcsstk33", "DIMACS10__ct2010", "DIMACS10__delaunay_n16", "Grund__bayer10",
    "DIMACS10__de2010", "AG-Monien__whitaker3", "HB__bcsstk21", "HB__dwt_1242",
]
FIELDS = ["setup", "kernel", "device", "read", "server"]


def load(path):
    import scipy.io

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        a = scipy.io.mmread(f)
    a = a.tocsr()
    if a.dtype.kind == "c":
        a = a.real.tocsr()
    a.sum_duplicates()
    a.sort_indices()
    return a.astype("float64")


def call(conn, body, precision, calls):
    path = f"/spmv?precision={precision}&expected_calls={calls}"
    conn.request("POST", path, body=body, headers={"Content-Type": csrbin.CONTENT_TYPE})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"POST {path}: {r.status} {data[:300]!r}")
    return json.loads(data)


def check(a, x, y, precision):
    import numpy as np

    ref = a @ x
    tol = 1e-3 if precision == "f32" else 1e-9
    scale = np.abs(a) @ np.abs(x) + 1e-300
    err = float(np.max(np.abs(np.asarray(y) - ref) / scale)) if ref.size else 0.0
    if err > tol:
        raise RuntimeError(f"y differs from scipy: max relative error {err:.3g}")


def bench(conn, name, a, args):
    import numpy as np

    x = np.random.default_rng(1).standard_normal(a.shape[1])
    width = 4 if args.precision == "f32" else 8
    body = csrbin.encode(a.shape, a.indptr, a.indices, a.data, x=x, value_width=width)
    if width == 4:
        x = x.astype(np.float32).astype(np.float64)
    runs = {1: [], args.many: []}
    first = call(conn, body, args.precision, 1) if not bench.seen else None
    bench.seen = True
    if first is not None:
        t = first["timings_ms"]
        print(f"(this run's first request, cold host memory: setup {t['setup']:.3f} ms, "
              f"server {t['server']:.3f} ms)")
    for _ in range(args.reps):
        for calls in runs:
            v = call(conn, body, args.precision, calls)
            check(a, x, v["y"], args.precision)
            runs[calls].append(v)
    for calls, vs in runs.items():
        med = {f: statistics.median(v["timings_ms"][f] or 0.0 for v in vs) for f in FIELDS}
        last = vs[-1]
        print(f"{name[:28]:<28} {a.nnz:>8} {calls:>6} {last['planning']['chosen']:<20} "
              f"{last['plan']['scheme']:>7} {last['launches']:>3} "
              + " ".join(f"{med[f]:>8.3f}" for f in FIELDS)
              + f" {med['setup'] / max(med['kernel'], 1e-9):>8.1f}")


bench.seen = False


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--precision", default="f64", choices=["f32", "f64"])
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--many", type=int, default=1000)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args(argv)
    if args.reps < 1 or args.many < 2:
        ap.error("--reps must be >= 1 and --many >= 2")
    files = args.files or [
        os.path.join(HERE, "..", "..", "shared", "matrices", f"{n}.mtx.gz") for n in DEFAULT
    ]
    files = [f for f in files if os.path.exists(f)]
    if not files:
        ap.error("no matrix files found")
    u = urllib.parse.urlparse(args.url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=300)
    print(f"{'matrix':<28} {'nnz':>8} {'calls':>6} {'chosen':<20} {'scheme':>7} {'la':>3} "
          + " ".join(f"{f:>8}" for f in FIELDS) + f" {'setup/k':>8}")
    try:
        for f in files:
            name = os.path.basename(f).split(".mtx")[0]
            bench(conn, name, load(f), args)
    except (RuntimeError, OSError) as e:
        print(f"first_call: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
