#!/usr/bin/env python3
"""Two running servers compared call by call on one uploaded stencil (binary x and y).

Uploads the same 5-point stencil (about --nnz nonzeros) to an old and a new
server, then alternates /spmv calls between them (old first on odd rounds),
so both see the same machine load; prints per server the medians over calls
of per-call figures (ms), computed from each answer's x-*-ms headers:
  after_read        server - read: the server's time once the body is in;
  own_after         server - read - kernel - upload_x_after - download_y: its
                    own part of that (upload_x_after: the part of x's upload
                    left after the last byte; a server without that header
                    uploads all of x then);
  handler_beside    server - read - device: outside the device's wall time;
  device_gap        device - kernel - upload_x_after - download_y;
  up_after, up_all  x's upload after the body, and all of it (every slice);
  read, kernel      receiving the body; the kernels' profiled time.

Usage: request_path_pair.py --old http://127.0.0.1:P1 --new http://127.0.0.1:P2 [--nnz N] [--calls C]
"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import request_path as rp  # noqa: E402
from cusparse_bench import stencil2d  # noqa: E402

FIGURES = {
    "after_read": lambda t: t["server"] - t["read"],
    "own_after": lambda t: t["server"] - t["read"] - t["kernel"] - t["upload_x_after"] - t["download_y"],
    "handler_beside": lambda t: t["server"] - t["read"] - t["device"],
    "device_gap": lambda t: t["device"] - t["kernel"] - t["upload_x_after"] - t["download_y"],
    "up_after": lambda t: t["upload_x_after"],
    "up_all": lambda t: t["upload_x"],
    "read": lambda t: t["read"],
    "kernel": lambda t: t["kernel"],
}


def main(argv):
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--nnz", type=int, default=10_000_000)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)
    clients = {"old": rp.Client(args.old), "new": rp.Client(args.new)}
    a = stencil2d(args.nnz)
    ids = {k: rp.upload(c, a) for k, c in clients.items()}
    x = np.random.default_rng(1).uniform(-1, 1, a.shape[1])
    want = a @ x
    rows = {"old": [], "new": []}
    for i in range(args.warmup + args.calls):
        for k in ("old", "new") if i % 2 else ("new", "old"):
            y, tm, _ = rp.one_call(clients[k], ids[k], "f64", x, "binary")
            if np.any(np.abs(y - want) > 1e-9 * (abs(a) @ abs(x) + 1e-30)):
                print(f"request_path_pair: {k}: y differs from scipy", file=sys.stderr)
                return 1
            if i >= args.warmup:
                rows[k].append(tm)
    for k, c in clients.items():
        c.delete(ids[k])
        med = {n: statistics.median(f(t) for t in rows[k]) for n, f in FIGURES.items()}
        print(f"{a.nnz} {k}: " + " ".join(f"{n} {v:.3f}" for n, v in med.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
