#!/usr/bin/env python3
"""The /spmv overhead of two (or more) running spmv-select servers, interleaved.

For each Matrix Market file (.mtx or .mtx.gz) and each server, uploads the
matrix as Matrix Market text (POST /matrices, which every version speaks),
then, --calls times after --warmup untimed calls, alternating the servers'
order call by call so that load on a shared machine falls on all alike:
  uploaded  POST /spmv?matrix_id=ID with binary x, binary y (Accept:
            application/octet-stream); figures from the x-*-ms headers;
  inline    POST /spmv with JSON {"matrix": <Matrix Market text>, "x": [...]}
            (the matrix parsed, planned, uploaded and prepared for this call
            only); figures from timings_ms.
Prints one Markdown row per matrix, form and server with medians of:
  kernel    kernel time (OpenCL profiling);
  device    x upload + kernels + y download, wall clock on the device worker;
  server    the whole request inside the server;
  srv-kern  server - kernel;  srv-dev  server - device;  client  wall clock here.
y of every server is compared with the first server's (relative to max |y|).

Usage: overhead_ab.py --server old=http://127.0.0.1:8101 --server new=http://127.0.0.1:8102
                      [--precision f64] [--calls 15] [--warmup 3] [--forms uploaded,inline] FILE...
Exit codes: 0 done; 1 a request failed or y differed; 2 bad usage.
"""

import argparse
import gzip
import http.client
import json
import statistics
import struct
import sys
import time
import urllib.parse


class Server:
    """One keep-alive connection to one server."""

    def __init__(self, name, url):
        u = urllib.parse.urlparse(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"--server wants NAME=http://HOST:PORT, got {url!r}")
        self.name = name
        self.conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=300)

    def request(self, method, path, body=None, headers=None):
        t0 = time.perf_counter()
        self.conn.request(method, path, body=body, headers=headers or {})
        r = self.conn.getresponse()
        data = r.read()
        client_ms = (time.perf_counter() - t0) * 1e3
        if r.status >= 300:
            raise RuntimeError(f"{self.name}: {method} {path}: {r.status} {data[:300]!r}")
        return r, data, client_ms


def read_text(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode()


def ncols_of(text):
    for line in text.splitlines():
        if line and not line.startswith("%"):
            return int(line.split()[1])
    raise ValueError("no size line")


def x_values(n):
    return [((i * 37) % 101) / 50.0 - 1.0 for i in range(n)]


def uploaded_call(srv, mid, xbin, prec):
    path = f"/spmv?matrix_id={urllib.parse.quote(mid)}&precision={prec}"
    hdr = {"Content-Type": "application/octet-stream", "Accept": "application/octet-stream"}
    r, data, client = srv.request("POST", path, xbin, hdr)
    h = lambda k: float(r.getheader(k))  # noqa: E731
    fig = {"kernel": h("x-kernel-ms"), "device": h("x-device-ms"), "server": h("x-server-ms"), "client": client}
    fmt = "<%dd" % (len(data) // 8) if prec == "f64" else "<%df" % (len(data) // 4)
    return fig, struct.unpack(fmt, data)


def inline_call(srv, body, prec):
    hdr = {"Content-Type": "application/json"}
    _, data, client = srv.request("POST", "/spmv", body, hdr)
    doc = json.loads(data)
    t = doc["timings_ms"]
    fig = {"kernel": t["kernel"], "device": t["device"], "server": t["server"], "client": client}
    return fig, doc["y"]


def differs(y, ref, prec):
    """Whether y and ref differ beyond rounding (plans may sum rows in other orders)."""
    scale = max((abs(v) for v in ref), default=0.0) or 1.0
    tol = 1e-4 if prec == "f32" else 1e-9
    return len(y) != len(ref) or any(abs(a - b) > tol * scale for a, b in zip(y, ref))


def run_form(servers, form, ctx, args):
    """Figures per server for one matrix and form, the servers interleaved."""
    figs = {s.name: [] for s in servers}
    ys = {}
    for i in range(args.warmup + args.calls):
        order = servers if i % 2 == 0 else servers[::-1]
        for s in order:
            if form == "uploaded":
                fig, y = uploaded_call(s, ctx["ids"][s.name], ctx["xbin"], args.precision)
            else:
                fig, y = inline_call(s, ctx["inline"], args.precision)
            ys[s.name] = y
            if i >= args.warmup:
                figs[s.name].append(fig)
    ref = ys[servers[0].name]
    bad = [n for n, y in ys.items() if differs(y, ref, args.precision)]
    return figs, bad


def row(name, nnz, form, server, figs):
    med = lambda k: statistics.median(f[k] for f in figs)  # noqa: E731
    d = lambda a, b: statistics.median(f[a] - f[b] for f in figs)  # noqa: E731
    return (
        f"| {name} | {nnz} | {form} | {server} | {med('kernel'):.3f} | {med('device'):.3f} | "
        f"{med('server'):.3f} | {d('server', 'kernel'):.3f} | {d('server', 'device'):.3f} | {med('client'):.3f} |"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", action="append", required=True, help="NAME=URL (repeat)")
    ap.add_argument("--precision", default="f64", choices=["f32", "f64"])
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--forms", default="uploaded,inline")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    try:
        servers = [Server(*s.split("=", 1)) for s in args.server]
    except (TypeError, ValueError) as e:
        print(e, file=sys.stderr)
        return 2
    print("| matrix | nnz | form | server | kernel ms | device ms | server ms | srv-kern ms | srv-dev ms | client ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    failed = False
    for path in args.files:
        text = read_text(path)
        name = path.rsplit("/", 1)[-1].removesuffix(".gz").removesuffix(".mtx")
        x = x_values(ncols_of(text))
        fmt = "<%dd" if args.precision == "f64" else "<%df"
        ctx = {
            "xbin": struct.pack(fmt % len(x), *x),
            "inline": json.dumps({"matrix": text, "x": x, "precision": args.precision}).encode(),
            "ids": {},
        }
        nnz = None
        for s in servers:
            _, data, _ = s.request("POST", "/matrices", text.encode(), {"Content-Type": "text/plain"})
            doc = json.loads(data)
            ctx["ids"][s.name] = doc["id"]
            nnz = doc.get("matrix", {}).get("nnz", nnz)
        for form in args.forms.split(","):
            figs, bad = run_form(servers, form, ctx, args)
            for s in servers:
                print(row(name, nnz, form, s.name, figs[s.name]), flush=True)
            if bad:
                print(f"# {name} {form}: y of {bad} differs from {servers[0].name}'s", file=sys.stderr)
                failed = True
        for s in servers:
            s.request("DELETE", f"/matrices/{urllib.parse.quote(ctx['ids'][s.name])}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
