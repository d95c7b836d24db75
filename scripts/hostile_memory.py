#!/usr/bin/env python3
# Peak memory (VmHWM) of a release server under hostile input: a nested gzip
# bomb, a 67-byte body declaring 50M rows, 12 concurrent ~200 MB uploads.
# Usage: cargo build --release -p server && python3 scripts/hostile_memory.py target/release/server [nested|tiny|twelve]...
# Writes its 200 MB test file to /tmp/meas/ (created if missing).
import gzip, http.client, json, os, subprocess, sys, threading, time, zlib, socket

SERVER = sys.argv[1]
PORT = 18431

def start(extra=()):
    # HOSTILE_DEVICE=1 runs with the OpenCL device (uploads then also hold device buffers).
    dev = [] if os.environ.get("HOSTILE_DEVICE") == "1" else ["--no-device"]
    p = subprocess.Popen([SERVER, "--bind", f"127.0.0.1:{PORT}", *dev, "--no-database",
                          "--models", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"), *extra],
                         stdout=subprocess.DEVNULL, stderr=open("/tmp/hostile_memory_server.log", "a"))
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=2); c.request("GET", "/healthz")
            if c.getresponse().status == 200: return p
        except OSError: time.sleep(0.05)
    raise SystemExit("server did not start")

def hwm(p):
    for line in open(f"/proc/{p.pid}/status"):
        if line.startswith(("VmHWM", "VmRSS")): yield line.split()[1]

def post(path, body, ctype, headers=None, timeout=600):
    # Raw socket: the server may answer (503, 413) before the body is sent; the
    # answer is read while sending, as curl does.
    h = {"Content-Type": ctype, "Content-Length": str(len(body)), "Connection": "close", **(headers or {})}
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    s = socket.create_connection(("127.0.0.1", PORT), timeout=timeout)
    t = time.time()
    def send():
        try: s.sendall(head.encode() + body)
        except OSError: pass
    th = threading.Thread(target=send); th.start()
    data = b""
    while True:
        try: ch = s.recv(1 << 16)
        except OSError: break
        if not ch: break
        data += ch
    dt = time.time() - t
    th.join(); s.close()
    hdr, _, payload = data.partition(b"\r\n\r\n")
    lines = hdr.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    ra = next((l.split(":", 1)[1].strip() for l in lines if l.lower().startswith("retry-after")), None)
    return status, payload[:160].decode(errors="replace"), dt, ra

def gz_stream(chunks):
    co = zlib.compressobj(9, zlib.DEFLATED, 31); out = []
    for ch in chunks: out.append(co.compress(ch))
    out.append(co.flush()); return b"".join(out)

def scenario(name, fn, extra=()):
    p = start(extra); base = list(hwm(p))
    try:
        t = time.time(); res = fn(); dt = time.time() - t
    except BaseException:
        p.kill(); raise
    ok = post("/predict", b"%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1\n2 2 2\n", "text/plain")
    peak, rss = hwm(p)
    print(f"== {name}: idle VmHWM {int(base[0])//1024} MB -> peak VmHWM {int(peak)//1024} MB; {dt:.2f} s; "
          f"normal request right after: {ok[0]} in {ok[2]*1e3:.0f} ms")
    for r in res: print("   ", r)
    p.terminate(); p.wait()

def nested():
    zero = b"\0" * (64 << 20)
    inner = gz_stream(zero for _ in range(32))          # 2 GiB of zeros
    outer = gzip.compress(inner, 9)
    r1 = post("/predict", outer, "text/plain")
    r2 = post("/matrices", outer, "text/plain", {"Content-Encoding": "gzip"})
    return [f"nested gzip, {len(outer)} bytes (inner {len(inner)} bytes, 2 GiB expanded): {r1[:2]} in {r1[2]*1e3:.1f} ms",
            f"same with Content-Encoding: gzip to /matrices: {r2[:2]}"]

TINY = b"%%MatrixMarket matrix coordinate real general\n50000000 1 1\n1 1 1.0\n"
def tiny():
    out = []
    for path, body, ct in [("/predict", TINY, "text/plain"), ("/matrices", TINY, "text/plain"),
                           ("/spmv", json.dumps({"matrix": TINY.decode(), "x": [1.0]}).encode(), "application/json")]:
        out.append(f"{len(body)}-byte body to {path}: {post(path, body, ct)[:2]}")
    return out

def big_file(path, target=200 << 20):
    if os.path.exists(path): return
    n_rows = 1_000_000
    with open(path, "w") as f:
        lines = []; size = 0; k = 0
        f.write("%%MatrixMarket matrix coordinate real general\n")
        per = 25; nnz = target // per
        f.write(f"{n_rows} {n_rows} {nnz}\n")
        import random; rnd = random.Random(0)
        buf = []
        for k in range(nnz):
            buf.append(f"{k % n_rows + 1} {rnd.randrange(n_rows)+1} {rnd.random():.6f}\n")
            if len(buf) == 100000: f.write("".join(buf)); buf = []
        f.write("".join(buf))

def twelve():
    os.makedirs("/tmp/meas", exist_ok=True); path = "/tmp/meas/big200.mtx"; big_file(path)
    body = open(path, "rb").read()
    res = [None] * 12
    def one(i): res[i] = post("/matrices", body, "text/plain")
    ts = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    [t.start() for t in ts]; [t.join() for t in ts]
    codes = {}
    for r in res: codes[r[0]] = codes.get(r[0], 0) + 1
    return [f"12 concurrent {len(body)/1e6:.0f} MB uploads to /matrices: status counts {codes}",
            *[f"{r[0]} {r[2]:.1f}s retry-after={r[3]} {r[1][:110]}" for r in res]]

which = sys.argv[2:] or ["nested", "tiny", "twelve"]
if "nested" in which: scenario("nested gzip bomb", nested)
if "tiny" in which: scenario("100-byte body declaring 50M rows", tiny)
if "twelve" in which: scenario("12 concurrent ~200 MB uploads", twelve)
