#!/usr/bin/env python3
"""cuSPARSE SpMV through CuPy on Matrix Market files, beside spmv-select's kernels.

For each matrix and precision, two figures (ms per y = A x, CUDA events):
  ms_cupy      CuPy's `A @ x`: builds the cuSPARSE descriptors, sizes and
               allocates the work buffer and allocates y on every call;
  ms_spmv_raw  cusparseSpMV with the matrix/vector descriptors and the work buffer
               made once, then many back-to-back calls from Python (on small
               matrices this is bound by Python's cost per call, not the GPU's);
  ms_spmv_graph the same calls captured once into a CUDA graph and replayed: no
               Python or launch cost between calls, the library's kernel cost,
               comparable with spmv-select's OpenCL kernel times (empty where
               stream capture is not available).
Each figure is the median of --samples samples, each sample timing --calls
back-to-back calls (auto: enough for about 10 ms) after --warmup calls.

Then both of cuSPARSE's CSR algorithms (alg1: CUSPARSE_SPMV_CSR_ALG1, the
default; alg2: CUSPARSE_SPMV_CSR_ALG2), each timed the two ways `spmv bench`
times our plans:
  ms_call_<alg>     (a) one call between two CUDA events, median of --samples;
  ms_graph100_<alg> (b) a CUDA graph of --graph-calls (100) calls replayed,
                    its time / 100, median of --samples;
  ms_b2b, ms_call, best_alg: the faster algorithm by (b), with its (a).
The headline ratio against our plan divides by ms_b2b beside `spmv bench`'s
b2b_ms (both sides: 100 calls back to back, one wait at the end).
GB/s (of the faster cusparseSpMV figure) uses the same minimum-bytes model as `spmv bench`:
(m+1)*4 + nnz*(4+V) + n*V + m*V bytes, V = 4 (f32) or 8 (f64).

Exit codes: 0 done; 1 a matrix failed; 2 bad usage or unreadable input;
3 skipped: CuPy or a CUDA GPU is missing (a message says which).
--dry-run reads and describes the matrices without CuPy (testable anywhere).
"""

import argparse
import csv
import gzip
import math
import os
import sys

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SKIPPED = 3


def matrix_name(path):
    """The file name without .gz and .mtx, as `spmv bench` names matrices;
    `gen_FAMILY_NNZ.csr` (`spmv gen`) is `gen:FAMILY:NNZ`."""
    name = os.path.basename(path)
    if name.startswith("gen_") and name.endswith(".csr"):
        fam, nnz = name[len("gen_"):-len(".csr")].rsplit("_", 1)
        return f"gen:{fam}:{nnz}"
    for suffix in (".gz", ".mtx"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def collect(paths):
    """Matrix Market files among paths (folders are listed, sorted)."""
    files = []
    for p in paths:
        if os.path.isdir(p):
            files.extend(
                sorted(
                    os.path.join(p, f)
                    for f in os.listdir(p)
                    if f.endswith(".mtx") or f.endswith(".mtx.gz") or f.endswith(".csr")
                )
            )
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise FileNotFoundError(p)
    return files


def read_binary_csr(path):
    """A scipy CSR matrix from a binary CSR file (`spmv gen`; the service's
    application/vnd.spmv-select.csr layout: 40-byte header, then row_ptr,
    col_idx and values, little-endian)."""
    import numpy as np
    import scipy.sparse as sp

    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"SPMVCSR\0":
        raise ValueError(f"{path}: not a binary CSR file")
    iw, vw = data[10], data[11]
    nrows, ncols, nnz = np.frombuffer(data, dtype="<u8", count=3, offset=16)
    it = {4: "<u4", 8: "<u8"}[iw]
    vt = {4: "<f4", 8: "<f8"}[vw]
    at = 40
    indptr = np.frombuffer(data, dtype=it, count=int(nrows) + 1, offset=at)
    at += (int(nrows) + 1) * iw
    indices = np.frombuffer(data, dtype=it, count=int(nnz), offset=at)
    at += int(nnz) * iw
    vals = np.frombuffer(data, dtype=vt, count=int(nnz), offset=at)
    m = sp.csr_matrix((vals.astype(np.float64), indices.astype(np.int64), indptr.astype(np.int64)),
                      shape=(int(nrows), int(ncols)))
    m.sort_indices()
    return m


def read_csr(path):
    """A scipy CSR matrix (float64, real part of complex values, duplicates
    summed, columns sorted) from a .mtx or .mtx.gz file, or a binary .csr."""
    import numpy as np
    import scipy.io
    import scipy.sparse as sp

    if path.endswith(".csr"):
        return read_binary_csr(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        m = scipy.io.mmread(f)
    m = sp.csr_matrix(m)
    if np.iscomplexobj(m.data):
        m = sp.csr_matrix((m.data.real, m.indices, m.indptr), shape=m.shape)
    m = m.astype(np.float64)
    m.sum_duplicates()
    m.sort_indices()
    return m


def stencil2d(nnz_target):
    """The 5-point Laplacian on an n x n grid with about nnz_target nonzeros (the
    grid `spmv bench --gen stencil2d:NNZ` builds: 5n^2 - 4n nonzeros)."""
    import numpy as np
    import scipy.sparse as sp

    n = max(1, round((4 + math.sqrt(16 + 20 * nnz_target)) / 10))
    one = np.ones(n)
    t = sp.diags([-one[:-1], 4 * one, -one[:-1]], [-1, 0, 1], format="csr")
    i = sp.identity(n, format="csr")
    off = sp.diags([-one[:-1], -one[:-1]], [-1, 1], format="csr")
    a = (sp.kron(i, t) + sp.kron(off, i)).tocsr()
    a.sum_duplicates()
    a.sort_indices()
    return a


def min_bytes(nrows, ncols, nnz, value_bytes):
    return (nrows + 1) * 4 + nnz * (4 + value_bytes) + ncols * value_bytes + nrows * value_bytes


def parse_precisions(text):
    out = []
    for p in text.split(","):
        p = p.strip()
        if p not in ("f32", "f64"):
            raise ValueError(f"precision must be f32 or f64, got {p!r}")
        out.append(p)
    return out


def load_cupy():
    """(cupy, cupyx, reason): the modules, or None and why they cannot be used."""
    try:
        import cupy
        import cupyx.scipy.sparse  # noqa: F401
        from cupyx import cusparse  # noqa: F401
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        return None, f"CuPy is not usable here ({type(e).__name__}: {e})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return None, f"CuPy found no CUDA device ({type(e).__name__}: {e})"
    if n < 1:
        return None, "CuPy found no CUDA device"
    return cupy, None


def median(v):
    s = sorted(v)
    k = len(s)
    return s[k // 2] if k % 2 else 0.5 * (s[k // 2 - 1] + s[k // 2])


def time_calls(cupy, fn, calls, samples, warmup):
    """Median over samples of (ms for `calls` back-to-back calls) / calls."""
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    out = []
    for _ in range(samples):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        out.append(cupy.cuda.get_elapsed_time(start, end) / calls)
    return median(out)


def calls_for(cupy, fn, requested):
    """The calls per sample: as given, or enough for about 10 ms (10..2000)."""
    if requested > 0:
        return requested
    fn()
    cupy.cuda.Device().synchronize()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(5):
        fn()
    end.record()
    end.synchronize()
    one = max(cupy.cuda.get_elapsed_time(start, end) / 5, 1e-4)
    return int(min(2000, max(10, 10.0 / one)))


ALGORITHMS = (
    # (column suffix, names of the constant in the bindings, newest first)
    ("alg1", ("CUSPARSE_SPMV_CSR_ALG1", "CUSPARSE_SPMV_ALG_DEFAULT", "CUSPARSE_MV_ALG_DEFAULT")),
    ("alg2", ("CUSPARSE_SPMV_CSR_ALG2", "CUSPARSE_CSRMV_ALG2")),
)


def algorithm(lib, names):
    """The first of `names` the bindings define (KeyError when none)."""
    for n in names:
        if hasattr(lib, n):
            return getattr(lib, n)
    raise KeyError(f"none of {', '.join(names)} in the cuSPARSE bindings")


class RawSpMV:
    """cusparseSpMV with descriptors and work buffer made once."""

    def __init__(self, cupy, a, x, y, alg_names=None):
        import numpy as np
        from cupy.cuda import device
        from cupyx import cusparse

        try:
            from cupy_backends.cuda.libs import cusparse as lib
        except ImportError:  # older CuPy
            from cupy.cuda import cusparse as lib
        try:
            from cupy._core import _dtype

            self.cuda_dtype = _dtype.to_cuda_dtype(a.dtype)
        except (ImportError, AttributeError):
            self.cuda_dtype = {4: 0, 8: 1}[a.dtype.itemsize]  # CUDA_R_32F, CUDA_R_64F
        self.lib = lib
        self.handle = device.get_cusparse_handle()
        self.op = lib.CUSPARSE_OPERATION_NON_TRANSPOSE
        self.alpha = np.array(1.0, dtype=a.dtype)
        self.beta = np.array(0.0, dtype=a.dtype)
        if alg_names is None:
            self.alg = getattr(lib, "CUSPARSE_SPMV_ALG_DEFAULT", getattr(lib, "CUSPARSE_MV_ALG_DEFAULT", 0))
        else:
            self.alg = algorithm(lib, alg_names)
        # Keep the descriptors (and what they point to) alive.
        self.a, self.x, self.y = a, x, y
        self.da = cusparse.SpMatDescriptor.create(a)
        self.dx = cusparse.DnVecDescriptor.create(x)
        self.dy = cusparse.DnVecDescriptor.create(y)
        size = lib.spMV_bufferSize(
            self.handle, self.op, self.alpha.ctypes.data, self.da.desc, self.dx.desc,
            self.beta.ctypes.data, self.dy.desc, self.cuda_dtype, self.alg,
        )
        self.buf = cupy.empty(max(int(size), 1), dtype=cupy.int8)

    def __call__(self):
        self.lib.spMV(
            self.handle, self.op, self.alpha.ctypes.data, self.da.desc, self.dx.desc,
            self.beta.ctypes.data, self.dy.desc, self.cuda_dtype, self.alg, self.buf.data.ptr,
        )

    def _direct(self):
        """cusparseSpMV from the loaded libcusparse through ctypes: CuPy's own
        binding refuses to be called during stream capture, the library does not."""
        import ctypes

        if getattr(self, "_fn", None) is None:
            path = None
            with open("/proc/self/maps") as maps:
                for line in maps:
                    if "libcusparse.so" in line:
                        path = line.split()[-1]
                        break
            if path is None:
                raise RuntimeError("libcusparse is not loaded in this process")
            fn = ctypes.CDLL(path).cusparseSpMV
            p, i = ctypes.c_void_p, ctypes.c_int
            fn.argtypes = [p, i, p, p, p, p, p, i, i, p]
            fn.restype = i
            self._fn = fn
        return self._fn

    def call_direct(self):
        rc = self._direct()(
            self.handle, self.op, self.alpha.ctypes.data, self.da.desc, self.dx.desc,
            self.beta.ctypes.data, self.dy.desc, self.cuda_dtype, self.alg, self.buf.data.ptr,
        )
        if rc != 0:
            raise RuntimeError(f"cusparseSpMV returned status {rc}")

    def graph_ms(self, cupy, calls, samples, warmup):
        """ms per call of `calls` cusparseSpMV calls captured into one CUDA graph
        and replayed (median of samples). The handle is pointed at the capturing
        stream for the capture and given back its stream afterwards."""
        self._direct()
        stream = cupy.cuda.Stream(non_blocking=True)
        before = cupy.cuda.get_current_stream().ptr
        self.lib.setStream(self.handle, stream.ptr)
        try:
            with stream:
                stream.begin_capture()
                try:
                    for _ in range(calls):
                        self.call_direct()
                finally:
                    graph = stream.end_capture()
            for _ in range(max(1, warmup // 4)):
                graph.launch(stream)
            stream.synchronize()
            out = []
            for _ in range(samples):
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(stream)
                graph.launch(stream)
                end.record(stream)
                end.synchronize()
                out.append(cupy.cuda.get_elapsed_time(start, end) / calls)
            return median(out)
        finally:
            self.lib.setStream(self.handle, before)


def bench_algorithms(cupy, a, x, y, check, row, args):
    """Both CSR algorithms by (a) and (b) into `row`, and the faster by (b).
    An algorithm the bindings or the library refuse is said and left empty."""
    best = None
    for suffix, names in ALGORITHMS:
        row[f"ms_call_{suffix}"] = row[f"ms_graph100_{suffix}"] = ""
        try:
            raw = RawSpMV(cupy, a, x, y, names)
            y.fill(0)
            raw()
            check(f"cusparseSpMV {suffix}", y.get())
            # (a): one call between two CUDA events, median of the samples.
            call = time_calls(cupy, raw, 1, args.samples, args.warmup)
            y.fill(0)
            cupy.cuda.Device().synchronize()
            b2b = raw.graph_ms(cupy, args.graph_calls, args.samples, args.warmup)
            check(f"cusparseSpMV {suffix} replayed from the CUDA graph", y.get())
        except Exception as e:
            print(f"cusparse_bench: {row['matrix']} {row['precision']}: {suffix} not timed "
                  f"({type(e).__name__}: {e})", file=sys.stderr)
            continue
        row[f"ms_call_{suffix}"] = f"{call:.6f}"
        row[f"ms_graph100_{suffix}"] = f"{b2b:.6f}"
        if best is None or b2b < best[1]:
            best = (suffix, b2b, call)
    row["best_alg"], row["ms_b2b"], row["ms_call"] = (
        (best[0], f"{best[1]:.6f}", f"{best[2]:.6f}") if best else ("", "", ""))
    return best is not None


def bench_one(cupy, name, host, precision, args):
    """One CSV row for a matrix in one precision (checked against scipy) and
    whether the raw cusparseSpMV could be timed."""
    import numpy as np
    import cupyx.scipy.sparse as csp

    dt = np.float32 if precision == "f32" else np.float64
    h = host.astype(dt)
    rng = np.random.default_rng(7)
    xh = rng.uniform(-1, 1, h.shape[1]).astype(dt)
    a = csp.csr_matrix((cupy.asarray(h.data), cupy.asarray(h.indices.astype(np.int32)),
                        cupy.asarray(h.indptr.astype(np.int32))), shape=h.shape)
    x = cupy.asarray(xh)
    y = cupy.zeros(h.shape[0], dtype=dt)
    want = h @ xh
    tol = (1e-3 if precision == "f32" else 1e-10) * (np.abs(h) @ np.abs(xh) + 1e-30)

    def check(label, got):
        if np.any(np.abs(got - want) > tol):
            raise RuntimeError(f"{name} {precision}: {label} differs from scipy")

    cupy_call = lambda: a @ x  # noqa: E731
    check("A @ x", cupy_call().get())
    # Every column empty until measured (an algorithm refused stays empty).
    row = dict.fromkeys(FIELDS, "")
    row.update({"matrix": name, "precision": precision, "nnz": h.nnz})
    try:
        raw = RawSpMV(cupy, a, x, y)
        raw()
        check("cusparseSpMV", y.get())
    except Exception as e:  # the low-level bindings moved or refused: say so, keep A @ x
        print(f"cusparse_bench: {name} {precision}: raw cusparseSpMV unavailable "
              f"({type(e).__name__}: {e}); only A @ x is timed", file=sys.stderr)
        raw = None
    calls = calls_for(cupy, raw or cupy_call, args.calls)
    row["calls"] = calls
    row["ms_cupy"] = f"{time_calls(cupy, cupy_call, max(1, calls // 4), args.samples, args.warmup):.6f}"
    if raw is not None:
        ms_raw = time_calls(cupy, raw, calls, args.samples, args.warmup)
        vb = 4 if precision == "f32" else 8
        row["ms_spmv_raw"] = f"{ms_raw:.6f}"
        best = ms_raw
        try:
            y.fill(0)
            cupy.cuda.Device().synchronize()
            ms_graph = raw.graph_ms(cupy, calls, args.samples, args.warmup)
            check("cusparseSpMV replayed from the CUDA graph", y.get())
            row["ms_spmv_graph"] = f"{ms_graph:.6f}"
            best = min(best, ms_graph)
        except Exception as e:  # capture refused: keep the back-to-back figure
            print(f"cusparse_bench: {name} {precision}: CUDA graph timing unavailable "
                  f"({type(e).__name__}: {e})", file=sys.stderr)
        row["gbps"] = f"{min_bytes(h.shape[0], h.shape[1], h.nnz, vb) / (best * 1e-3) / 1e9:.3f}"
    algs_ok = raw is not None and bench_algorithms(cupy, a, x, y, check, row, args)
    return row, algs_ok


def cases(args):
    """(name, loader) for every input, lazily."""
    out = [(matrix_name(f), (lambda f=f: read_csr(f))) for f in collect(args.paths)]
    for n in args.stencil2d:
        out.append((f"gen:stencil2d:{n}", (lambda n=n: stencil2d(n))))
    return out


def dry_run(todo, precisions):
    for name, load in todo:
        a = load()
        for p in precisions:
            vb = 4 if p == "f32" else 8
            print(f"would time {name} {p}: {a.shape[0]}x{a.shape[1]}, {a.nnz} nonzeros, "
                  f"{min_bytes(a.shape[0], a.shape[1], a.nnz, vb)} bytes per SpMV")
    print(f"dry run: {len(todo)} matrices x {len(precisions)} precisions, nothing timed")
    return 0


FIELDS = ["matrix", "precision", "nnz", "ms_cupy", "ms_spmv_raw", "ms_spmv_graph", "gbps", "calls",
          "ms_call_alg1", "ms_graph100_alg1", "ms_call_alg2", "ms_graph100_alg2",
          "ms_b2b", "ms_call", "best_alg"]


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*",
                    help="Matrix Market files or folders (.mtx, .mtx.gz), or binary CSR files of `spmv gen` (.csr)")
    ap.add_argument("--precision", default="f32,f64", help="f32, f64 or f32,f64")
    ap.add_argument("--stencil2d", type=int, action="append", default=[],
                    help="also a generated 5-point stencil of about NNZ nonzeros (repeatable)")
    ap.add_argument("--samples", type=int, default=7)
    ap.add_argument("--calls", type=int, default=0, help="calls per sample (0: about 10 ms)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--graph-calls", type=int, default=100,
                    help="calls in the CUDA graph of method (b) (as spmv bench --back-to-back)")
    ap.add_argument("--out", help="CSV file (default: standard output)")
    ap.add_argument("--dry-run", action="store_true", help="read and describe, time nothing")
    return ap.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    try:
        precisions = parse_precisions(args.precision)
        todo = cases(args)
    except (ValueError, FileNotFoundError) as e:
        print(f"cusparse_bench: {e}", file=sys.stderr)
        return EXIT_USAGE
    if not todo:
        print("cusparse_bench: no matrices given", file=sys.stderr)
        return EXIT_USAGE
    if args.dry_run:
        return dry_run(todo, precisions)
    cupy, why = load_cupy()
    if cupy is None:
        print(f"cusparse_bench: SKIPPED: {why}; no cuSPARSE figures", file=sys.stderr)
        return EXIT_SKIPPED
    out = open(args.out, "w", newline="") if args.out else sys.stdout
    fields = FIELDS
    w = csv.DictWriter(out, fieldnames=fields)
    w.writeheader()
    failed = 0
    for name, load in todo:
        try:
            host = load()
            for p in precisions:
                row, raw_ok = bench_one(cupy, name, host, p, args)
                w.writerow(row)
                out.flush()
                failed += 0 if raw_ok else 1
        except Exception as e:
            print(f"cusparse_bench: {name}: {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
    if args.out:
        out.close()
    print(f"cusparse_bench: {len(todo)} matrices, {failed} problems (see above)", file=sys.stderr)
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
