#!/usr/bin/env python3
"""The cost of the service's request path on an uploaded matrix, beside the device work.

Uploads a generated 5-point stencil (about --nnz nonzeros, the grid `spmv bench
--gen stencil2d:NNZ` builds) to a running spmv-select server, then times
POST /spmv by id, --calls times after --warmup calls, over one keep-alive
connection, in two forms:
  binary  x as little-endian bytes, y back as bytes (Accept: application/octet-stream),
          the server's timings read from its X-*-Ms headers;
  json    x and y as JSON arrays, timings from the body's timings_ms.
Each answer is checked against scipy. One CSV row per precision and form, medians:
  client_ms   wall clock of the whole request, seen by this client;
  server_ms   the server's own time for the request (from the handler's start,
              the body's reading included, to the answer's encoding);
  read_ms     of which receiving and parsing the body (binary x by id on a
              device is received straight into the buffer x's upload reads,
              each value checked finite as it arrives: that copy and check
              are in read_ms, overlapped with receiving; servers with the
              since-removed --stream-x also uploaded each completed 512 KiB
              slice of x while the rest arrived);
  device_ms   wall clock of the device work after the body (upload x, or
              with --stream-x its last slice, kernels, download y);
  kernel_ms, upload_x_ms, download_y_ms   OpenCL profiling of each part
              (upload_x_ms: with --stream-x every slice of x, those
              overlapped with receiving included);
  upload_x_after_ms   the part of upload_x_ms enqueued after x's last byte
              (upload_x_ms itself now that x is always uploaded whole; the
              last slice with --stream-x; servers without the header upload
              all of x then, so it is upload_x_ms);
  over_device = client_ms / (kernel_ms + upload_x_ms + download_y_ms);
  server_over_ms = server_ms - kernel_ms - upload_x_ms - download_y_ms: the
               server's own work around the device's (issue 11: <= 0.2 ms);
  server_unread_ms = server_over_ms - read_ms: the same without receiving
               the body, which goes at the loopback's (the client's) pace
               (with --stream-x, the slices uploaded during read_ms were
               subtracted twice, so this understated the server's own time;
               see server_after_ms);
  server_after_ms = server_ms - read_ms - kernel_ms - upload_x_after_ms
               - download_y_ms: the server's own time once the body is in,
               beside the device work still left then (equal to
               server_unread_ms for servers that upload x only once whole);
  after_read_ms = server_ms - read_ms: all the server's time once the body is in;
               each split is the median of the calls' own differences (at
               10M nonzeros on a 2-core VM read_ms and kernel_ms vary by
               milliseconds from call to call, so a difference of the
               columns' medians moved by +-0.5 ms, even below zero);
  client_over_ms = client_ms - server_ms: HTTP, the loopback and Python;
  loopback_ms  sending x's bytes and receiving y's over a loopback TCP
               connection to a thread of this script, measured in the same
               run (issue 11: client_over_ms <= 1 ms + loopback_ms);
  loopback_x_ms  the same for x's bytes alone (a one-byte answer): the
               floor of read_ms, to see whether receiving keeps the pace;
  in_place     the fraction of timed binary calls whose kernels read x and
               wrote y where the request and the answer hold them (header
               x-in-place: shared host pools on a CPU device, no copy;
               upload_x_ms and download_y_ms are then the unmap and the map).

Usage: request_path.py --url http://127.0.0.1:PORT [--nnz 100000,1000000,10000000] [--awkward] [--out FILE]
  --awkward first checks y against scipy on awkward shapes (1x1, no entries, empty rows,
            one huge row, very wide, very tall), every precision and form, 3 calls each.
(bench/request_path_ab.sh runs it on two server binaries, alternated, for before/after figures.)
Exit codes: 0 done; 1 a request failed or an answer was wrong; 2 bad usage.
"""

import argparse
import csv
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cusparse_bench import stencil2d  # noqa: E402  (the same grid as `spmv bench`)


class Client:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"--url must be http://HOST:PORT, got {url!r}")
        self.host, self.port = u.hostname, u.port or 80
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)

    def delete(self, mid):
        self.conn.request("DELETE", f"/matrices/{mid}")
        r = self.conn.getresponse()
        r.read()
        if r.status >= 300:
            raise RuntimeError(f"DELETE /matrices/{mid}: {r.status}")

    def post(self, path, body, headers):
        self.conn.request("POST", path, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"POST {path}: {r.status} {data[:300]!r}")
        return r, data

    def post_into(self, path, body, headers, alloc):
        """POST; a successful body is read straight into ``alloc(length)``
        (an array), with no bytes object in between."""
        self.conn.request("POST", path, body=body, headers=headers)
        r = self.conn.getresponse()
        if r.status >= 300:
            raise RuntimeError(f"POST {path}: {r.status} {r.read()[:300]!r}")
        out = alloc(int(r.getheader("Content-Length")))
        view, got = memoryview(out).cast("B"), 0
        while got < len(view):
            n = r.readinto(view[got:])
            if not n:
                raise RuntimeError(f"POST {path}: the body ended after {got} bytes")
            got += n
        if r.read(1):
            raise RuntimeError(f"POST {path}: more body than Content-Length")
        return r, out


def upload(client, a):
    """Uploads in the binary CSR format (the Python package's encoder)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python", "src"))
    from spmv_select import csrbin

    body = csrbin.encode(a.shape, a.indptr, a.indices, a.data, value_width=8)
    _, data = client.post("/matrices", body, {"Content-Type": csrbin.CONTENT_TYPE})
    return json.loads(data)["id"]


def loopback_ms(x_bytes, y_bytes, reps=30):
    """Median time to send x_bytes and receive y_bytes over loopback TCP (a
    thread of this process answers), the floor of moving x and y."""
    import numpy as np

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def echo():
        c, _ = srv.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        inb, out = memoryview(bytearray(max(x_bytes, 1))), bytes(y_bytes)
        for _ in range(reps):
            got = 0
            while got < x_bytes:
                got += c.recv_into(inb[got:x_bytes])
            c.sendall(out)
        c.close()

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    s = socket.create_connection(srv.getsockname())
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    x, y = bytes(x_bytes), memoryview(bytearray(max(y_bytes, 1)))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        s.sendall(x)
        got = 0
        while got < y_bytes:
            got += s.recv_into(y[got:y_bytes])
        times.append((time.perf_counter() - t0) * 1e3)
    s.close()
    t.join()
    srv.close()
    return float(np.median(times))


def one_call(client, mid, precision, x, form):
    """(y, timings dict, client ms) of one /spmv by id."""
    import numpy as np

    if form == "binary":
        # As the shipped client (clients/python) sends and reads: x from the
        # array's own memory (converted before the clock starts, and not at
        # all when it already has the wire's dtype), y read straight into a
        # new array; the client's copies are not the service's time.
        le = "<f4" if precision == "f32" else "<f8"
        body = memoryview(np.ascontiguousarray(x, dtype=le)).cast("B")
        t = time.perf_counter()
        r, y = client.post_into(
            f"/spmv?matrix_id={mid}&precision={precision}", body,
            {"Content-Type": "application/octet-stream", "Accept": "application/octet-stream"},
            lambda n: np.empty(n // np.dtype(le).itemsize, dtype=le))
        ms = (time.perf_counter() - t) * 1e3
        h = {k.lower(): v for k, v in r.getheaders()}
        # (servers before x-read-ms existed: NaN)
        tm = {k: float(h.get(f"x-{k.replace('_', '-')}-ms", "nan")) for k in
              ("kernel", "upload_x", "download_y", "device", "server", "read", "upload_x_after")}
        tm["in_place"] = h.get("x-in-place") == "true"
    else:
        t = time.perf_counter()
        body = json.dumps({"matrix_id": mid, "x": x.tolist(), "precision": precision}).encode()
        _, data = client.post("/spmv", body, {"Content-Type": "application/json"})
        ms = (time.perf_counter() - t) * 1e3
        doc = json.loads(data)
        y = np.array(doc["y"])
        tm = {k: float(doc["timings_ms"].get(k, "nan")) for k in
              ("kernel", "upload_x", "download_y", "device", "server", "read", "upload_x_after")}
        tm["in_place"] = False
    if tm["upload_x_after"] != tm["upload_x_after"]:  # NaN: a server that uploads x once whole
        tm["upload_x_after"] = tm["upload_x"]
    return y, tm, ms


def reference(a, x, precision):
    """scipy's y = A x in `precision`, and each entry's tolerance."""
    import numpy as np

    dt = np.float32 if precision == "f32" else np.float64
    tol = (1e-3 if precision == "f32" else 1e-9) * (abs(a) @ abs(x) + 1e-30)
    return a.astype(dt) @ x.astype(dt), tol


def matches(y, ref):
    """Whether the service's y equals `reference`'s within its tolerance."""
    import numpy as np

    want, tol = ref
    return y.shape == want.shape and not np.any(np.abs(y - want) > tol)


def bench(client, mid, a, precision, form, calls, warmup):
    import numpy as np

    rng = np.random.default_rng(11)
    x = rng.uniform(-1, 1, a.shape[1])
    ref = reference(a, x, precision)
    rows = []
    for i in range(warmup + calls):
        y, tm, ms = one_call(client, mid, precision, x, form)
        if not matches(y, ref):
            raise RuntimeError(f"{form} {precision}: y differs from scipy")
        if i >= warmup:
            rows.append((ms, tm))
    med = lambda v: statistics.median(v)  # noqa: E731
    out = {"form": form, "precision": precision, "nrows": a.shape[0], "nnz": a.nnz, "calls": calls,
           "client_ms": med([r[0] for r in rows])}
    for k in ("server", "read", "device", "kernel", "upload_x", "upload_x_after", "download_y"):
        out[f"{k}_ms"] = med([r[1][k] for r in rows])
    out["in_place"] = sum(r[1]["in_place"] for r in rows) / max(len(rows), 1)
    # Each split is the median of the calls' own differences.
    split = lambda f: med([f(r[0], r[1]) for r in rows])  # noqa: E731
    copies = lambda t: t["kernel"] + t["upload_x"] + t["download_y"]  # noqa: E731
    out["after_read_ms"] = split(lambda c, t: t["server"] - t["read"])
    out["server_after_ms"] = split(
        lambda c, t: t["server"] - t["read"] - t["kernel"] - t["upload_x_after"] - t["download_y"])
    out["over_device"] = split(lambda c, t: c / copies(t))
    out["server_over_ms"] = split(lambda c, t: t["server"] - copies(t))
    out["server_unread_ms"] = split(lambda c, t: t["server"] - copies(t) - t["read"])
    out["client_over_ms"] = split(lambda c, t: c - t["server"])
    width = 4 if precision == "f32" else 8
    out["loopback_ms"] = loopback_ms(width * a.shape[1], width * a.shape[0])
    out["loopback_x_ms"] = loopback_ms(width * a.shape[1], 1)
    return out


def awkward_shapes():
    """(name, scipy CSR) of the shapes the engine's tests call awkward, at
    sizes that also exercise the device's copies."""
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(5)

    def rand(m, n, nnz):
        r, c = rng.integers(0, m, nnz), rng.integers(0, n, nnz)
        return sp.csr_matrix((rng.uniform(-1, 1, nnz), (r, c)), shape=(m, n))

    used = rng.choice(2000, 200, replace=False)  # nine rows in ten empty
    r = used[rng.integers(0, 200, 3000)]
    rows = sp.csr_matrix((rng.uniform(-1, 1, 3000), (r, rng.integers(0, 500, 3000))), shape=(2000, 500))
    huge = sp.lil_matrix((3, 200_000))
    huge[1, :] = rng.uniform(-1, 1, 200_000)
    huge[0, 7] = huge[2, 199_999] = 1.5
    return [
        ("1x1", sp.csr_matrix(np.array([[2.5]]))),
        ("no entries", sp.csr_matrix((50, 40))),
        ("empty rows", rows),
        ("one huge row", sp.csr_matrix(huge)),
        ("very wide", rand(4, 500_000, 1000)),
        ("very tall", rand(400_000, 3, 600_000)),
    ]


def check_awkward(client, precisions, forms, calls=3):
    """Each awkward shape uploaded, multiplied `calls` times per precision and
    form with a new x each time, y compared with scipy's; raises on a
    difference. Returns the number of calls checked."""
    import numpy as np

    done = 0
    rng = np.random.default_rng(9)
    for name, a in awkward_shapes():
        a.sort_indices()
        mid = upload(client, a)
        for p in precisions:
            for f in forms:
                for _ in range(calls):
                    x = rng.uniform(-1, 1, a.shape[1])
                    y, _, _ = one_call(client, mid, p, x, f)
                    if not matches(y, reference(a, x, p)):
                        raise RuntimeError(f"awkward {name} ({a.shape[0]}x{a.shape[1]}, {a.nnz} nnz) "
                                           f"{f} {p}: y differs from scipy")
                    done += 1
        client.delete(mid)
    return done


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--nnz", default="1000000",
                    help="nonzeros of the stencil, or a comma list (e.g. 100000,1000000,10000000)")
    ap.add_argument("--precision", default="f64,f32")
    ap.add_argument("--forms", default="binary,json")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", help="CSV file (default: standard output)")
    ap.add_argument("--awkward", action="store_true",
                    help="first check y against scipy on awkward shapes (1x1, no entries, empty rows, "
                         "one huge row, very wide, very tall) in every precision and form")
    args = ap.parse_args(argv)
    try:
        client = Client(args.url)
        precisions = [p for p in args.precision.split(",") if p]
        forms = [f for f in args.forms.split(",") if f]
        sizes = [int(n) for n in args.nnz.split(",") if n]
        if any(p not in ("f32", "f64") for p in precisions) or any(f not in ("binary", "json") for f in forms):
            raise ValueError("--precision takes f32,f64 and --forms binary,json")
    except ValueError as e:
        print(f"request_path: {e}", file=sys.stderr)
        return 2
    fields = ["form", "precision", "nrows", "nnz", "calls", "client_ms", "server_ms", "read_ms", "device_ms",
              "kernel_ms", "upload_x_ms", "download_y_ms", "over_device", "server_over_ms",
              "server_unread_ms", "client_over_ms", "loopback_ms", "upload_x_after_ms",
              "server_after_ms", "after_read_ms", "loopback_x_ms", "in_place"]
    out = open(args.out, "w", newline="") if args.out else sys.stdout
    w = csv.DictWriter(out, fieldnames=fields)
    w.writeheader()
    try:
        if args.awkward:
            n = check_awkward(client, precisions, forms)
            print(f"request_path: awkward shapes: {n} calls, y equal to scipy's in every one", file=sys.stderr)
        for n in sizes:
            a = stencil2d(n)
            mid = upload(client, a)
            for p in precisions:
                for f in forms:
                    r = bench(client, mid, a, p, f, args.calls, args.warmup)
                    report(w, out, r)
            client.delete(mid)
    except (RuntimeError, OSError, KeyError, ValueError) as e:
        print(f"request_path: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if args.out:
            out.close()
    return 0


def report(w, out, r):
    """One CSV row and one line on standard error."""
    w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
    out.flush()
    print(f"request_path: {r['nnz']:>9} nnz {r['form']:6} {r['precision']}: client {r['client_ms']:.3f} ms, "
          f"server {r['server_ms']:.3f} (reading the body {r['read_ms']:.3f}), "
          f"device {r['device_ms']:.3f} = kernel {r['kernel_ms']:.3f} + x {r['upload_x_ms']:.3f} "
          f"+ y {r['download_y_ms']:.3f}; client / (kernel + transfers) = {r['over_device']:.2f}; "
          f"server - kernel - copies {r['server_over_ms']:.3f} (target <= 0.2; "
          f"{r['server_unread_ms']:.3f} without reading the body), client - server "
          f"{r['client_over_ms']:.3f} (target <= 1 + loopback {r['loopback_ms']:.3f}); "
          f"after the body: {r['after_read_ms']:.3f} = kernel + x after {r['upload_x_after_ms']:.3f} "
          f"+ y + {r['server_after_ms']:.3f} of the server's own; "
          f"read {r['read_ms']:.3f} against loopback x alone {r['loopback_x_ms']:.3f}",
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
