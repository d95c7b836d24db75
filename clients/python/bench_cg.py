#!/usr/bin/env python3
"""CG through the service against local scipy, per iteration.

Builds a 2D 5-point Laplacian with about --nnz nonzeros (1M by default),
uploads it, runs --iters CG iterations through ``Client.operator(id)`` (each
product one binary /spmv call) and prints, as medians per iteration:

- round trip: the client's time for one product (request sent to y in hand);
- client + network = round trip - server time (``x-server-ms``): HTTP, the
  loopback or network, encoding x and decoding y in Python;
- server = server time - device time (``x-device-ms``): parsing, queueing, the
  cache lookup, building the answer;
- transfer = ``x-upload-x-ms`` + ``x-download-y-ms`` (profiled copies of x and y);
- kernel = ``x-kernel-ms`` (profiled SpMV kernels only);

beside a local scipy ``A @ x`` on the same matrix and the whole CG solve
both ways, and the whole CG on the device (``Client.solve``, one request)
against the operator-driven one. Without --url it starts the release server binary itself on a free
loopback port (no database, the repository's models).

    python3 clients/python/bench_cg.py [--url http://host:port] [--nnz 1000000] [--precision f64]
"""

import argparse
import os

# One BLAS thread: on a small machine shared with the server, OpenBLAS threads
# spinning beside PoCL's make scipy's vector operations (and so local CG) several
# times slower; a single thread is the fair local baseline. Set before numpy loads.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "src"))
from spmv_select import Client, TransportError  # noqa: E402

ROOT = HERE.parents[1]


def laplacian_2d(n: int) -> sp.csr_matrix:
    """The 5-point Laplacian on an n x n grid (SPD), n^2 rows, ~5 n^2 nonzeros."""
    t = sp.diags([-1.0, 4.0, -1.0], [-1, 0, 1], shape=(n, n))
    i = sp.identity(n)
    off = sp.diags([-1.0, -1.0], [-1, 1], shape=(n, n))
    return (sp.kron(i, t) + sp.kron(off, i)).tocsr()


def start_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = ROOT / "target" / "release" / "server"
    if not exe.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "server"], cwd=ROOT, check=True)
    log = open(os.devnull, "w")
    proc = subprocess.Popen(
        [str(exe), "--bind", f"127.0.0.1:{port}", "--no-database", "--models-dir", str(ROOT / "models")],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            health = Client(url, timeout=2).healthz()
        except TransportError:
            time.sleep(0.2)
            continue
        if health.get("device"):
            return url, proc
        proc.kill()
        raise SystemExit("the server has no OpenCL device")
    proc.kill()
    raise SystemExit("the server did not start")


class TimedOperator(sla.LinearOperator):
    """The service's operator, keeping the timings of every product."""

    def __init__(self, client, mid, precision, shape):
        super().__init__(dtype=np.float32 if precision == "f32" else np.float64, shape=shape)
        self.client, self.mid, self.precision = client, mid, precision
        self.timings = []

    def _matvec(self, x):
        y, t = self.client.spmv_timed(self.mid, np.ravel(x), self.precision)
        self.timings.append(t)
        return y


def median_ms(f, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t) * 1e3)
    return float(np.median(ts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url")
    ap.add_argument("--nnz", type=int, default=1_000_000)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--precision", choices=["f32", "f64"], default="f64")
    args = ap.parse_args()

    proc = None
    url = args.url
    if not url:
        url, proc = start_server()
    try:
        run(url, args)
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def run(url, args):
    n = int(round((args.nnz / 5) ** 0.5))
    A = laplacian_2d(n)
    dtype = np.float32 if args.precision == "f32" else np.float64
    b = np.ones(A.shape[0], dtype=dtype)
    c = Client(url, timeout=300)
    info = c.upload_info(A, precision=args.precision)
    mid = info["id"]
    dev = c.device()
    print(f"matrix: 2D Laplacian {n}x{n} grid, {A.shape[0]} rows, {A.nnz} nonzeros, {args.precision}")
    print(f"device: {dev.get('name')} ({dev.get('platform')}); plan scheme {info['plan']['scheme']}")
    print(f"upload (binary CSR, {info['bytes']['host']} host bytes): {info['timings_ms']['total']:.1f} ms server time")

    op = TimedOperator(c, mid, args.precision, A.shape)
    op.matvec(b)  # warm: first call on this connection
    op.timings.clear()
    t = time.perf_counter()
    _, _ = sla.cg(op, b, rtol=1e-30, maxiter=args.iters)
    cg_service = (time.perf_counter() - t) * 1e3
    ts = op.timings
    k = len(ts)

    Ad = A.astype(dtype)
    t = time.perf_counter()
    sla.cg(Ad, b, rtol=1e-30, maxiter=args.iters)
    cg_local = (time.perf_counter() - t) * 1e3
    x = np.random.default_rng(0).standard_normal(A.shape[1]).astype(dtype)
    local = median_ms(lambda: Ad @ x, 50)

    med = lambda xs: float(np.median(xs))  # noqa: E731
    rt = med([t.round_trip for t in ts])
    server = med([t.server - t.device for t in ts])
    net = med([t.round_trip - t.server for t in ts])
    transfer = med([t.upload_x + t.download_y for t in ts])
    kernel = med([t.kernel for t in ts])
    device = med([t.device for t in ts])
    overhead = med([t.round_trip - t.kernel for t in ts])
    print(f"\nper CG iteration (one product), median of {k}, in ms:")
    print(f"  round trip               {rt:8.3f}")
    print(f"  client + network         {net:8.3f}   (round trip - x-server-ms)")
    print(f"  server (outside device)  {server:8.3f}   (x-server-ms - x-device-ms)")
    print(f"  device wall              {device:8.3f}   (x-device-ms)")
    print(f"    transfer x + y         {transfer:8.3f}   (x-upload-x-ms + x-download-y-ms)")
    print(f"    kernel                 {kernel:8.3f}   (x-kernel-ms)")
    print(f"  local scipy A @ x        {local:8.3f}")
    print(f"overhead over the kernel (round trip - kernel): {overhead:.3f} ms = "
          f"{overhead / local:.2f}x local A @ x (target <= 3x)")
    print(f"CG, {args.iters} iterations: service {cg_service:.0f} ms "
          f"({cg_service / args.iters:.2f} ms/it), local scipy {cg_local:.0f} ms "
          f"({cg_local / args.iters:.2f} ms/it)")
    # The whole CG on the device (POST /matrices/{id}/solve), same iterations.
    c.solve(mid, b, tol=1e-30, maxiter=2, precision=args.precision)  # warm
    t = time.perf_counter()
    r = c.solve(mid, b, tol=1e-30, maxiter=args.iters, precision=args.precision)
    cg_device = (time.perf_counter() - t) * 1e3
    print(f"CG, {r.iterations} iterations on the device (POST /matrices/{{id}}/solve): "
          f"{cg_device:.0f} ms round trip ({r.device_ms:.0f} ms on the device worker), "
          f"{cg_service / cg_device:.1f}x the operator-driven CG (target >= 20x), "
          f"{cg_local / cg_device:.2f}x local scipy")
    c.delete(mid)


if __name__ == "__main__":
    main()
