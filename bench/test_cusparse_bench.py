"""Tests of the parts of cusparse_bench.py that need no GPU (python3 -m unittest
discover -s bench). The timing itself can only run where CuPy sees a GPU."""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cusparse_bench as cb  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "sparse", "tests", "data")


class Pure(unittest.TestCase):
    def test_names_match_spmv_bench(self):
        self.assertEqual(cb.matrix_name("/a/HB__can_229.mtx.gz"), "HB__can_229")
        self.assertEqual(cb.matrix_name("x.mtx"), "x")

    def test_reads_gzip_symmetric_pattern_as_spmv_does(self):
        a = cb.read_csr(os.path.join(DATA, "HB__can_229.mtx.gz"))
        self.assertEqual(a.shape, (229, 229))
        self.assertEqual(a.nnz, 1777)  # the symmetric pattern expanded, as `spmv info` says
        self.assertTrue(a.has_sorted_indices)

    def test_generated_names_and_binary_csr_of_spmv_gen(self):
        self.assertEqual(cb.matrix_name("/w/gen_power_law_4000000.csr"), "gen:power_law:4000000")
        self.assertEqual(cb.matrix_name("gen_uniform_random_100.csr"), "gen:uniform_random:100")
        import struct
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "gen_road_like_3.csr")
            # 3x4, rows [1, 0, 2] nonzeros, the layout `spmv gen` writes.
            body = b"SPMVCSR\0" + struct.pack("<HBBI", 1, 4, 8, 0) + struct.pack("<QQQ", 3, 4, 3)
            body += struct.pack("<4I", 0, 1, 1, 3) + struct.pack("<3I", 2, 0, 3)
            body += struct.pack("<3d", 1.5, -2.0, 4.0)
            with open(p, "wb") as f:
                f.write(body)
            self.assertEqual(cb.collect([d]), [p])
            a = cb.read_csr(p)
            self.assertEqual(a.shape, (3, 4))
            self.assertEqual(a.nnz, 3)
            self.assertEqual((a[0, 2], a[2, 0], a[2, 3]), (1.5, -2.0, 4.0))

    def test_reads_plain_text_too(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "t.mtx")
            with open(p, "w") as f:
                f.write("%%MatrixMarket matrix coordinate real general\n3 2 3\n1 1 2.0\n3 2 -1\n1 1 1\n")
            a = cb.read_csr(p)
            self.assertEqual(a.shape, (3, 2))
            self.assertEqual(a.nnz, 2)  # duplicates summed
            self.assertEqual(a[0, 0], 3.0)

    def test_stencil_has_the_grid_of_spmv_gen(self):
        a = cb.stencil2d(20000)
        n = a.shape[0] ** 0.5
        self.assertEqual(a.nnz, 5 * a.shape[0] - 4 * int(n))
        self.assertEqual(abs(a.sum(axis=1)).max(), 2.0)  # corners: 4 - 2

    def test_bytes_model(self):
        self.assertEqual(cb.min_bytes(2, 3, 4, 8), 3 * 4 + 4 * 12 + 3 * 8 + 2 * 8)

    def test_dry_run_describes_and_exits_zero(self):
        out = io.StringIO()
        with redirect_stdout(out):
            rc = cb.main(["--dry-run", "--precision", "f32", DATA])
        self.assertEqual(rc, 0)
        self.assertIn("would time HB__can_229 f32", out.getvalue())

    def test_usage_errors_and_skip_have_distinct_codes(self):
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(cb.main(["--precision", "f16", DATA]), cb.EXIT_USAGE)
            self.assertEqual(cb.main([os.path.join(DATA, "missing.mtx")]), cb.EXIT_USAGE)
            self.assertEqual(cb.main([]), cb.EXIT_USAGE)
        saved = sys.modules.get("cupy")
        sys.modules["cupy"] = None  # import cupy now fails, as where it is not installed
        try:
            with redirect_stderr(err):
                rc = cb.main([DATA])
        finally:
            if saved is None:
                del sys.modules["cupy"]
            else:
                sys.modules["cupy"] = saved
        self.assertEqual(rc, cb.EXIT_SKIPPED)
        self.assertIn("SKIPPED", err.getvalue())


class FakeCupy:
    """Just enough of CuPy, on numpy and scipy, to run the timing loop's Python
    (the raw cuSPARSE bindings are absent, as in a CuPy that moved them)."""

    def __init__(self):
        import types

        import numpy as np
        import scipy.sparse as sp

        self.np = np
        clock = [0.0]

        class Arr(np.ndarray):
            def get(self):
                return np.asarray(self)

        class Event:
            def record(self):
                clock[0] += 0.5
                self.t = clock[0]

            def synchronize(self):
                pass

        class Csr:
            def __init__(self, parts, shape):
                self.m = sp.csr_matrix(tuple(np.asarray(p) for p in parts), shape=shape)

            def __matmul__(self, x):
                return (self.m @ np.asarray(x)).view(Arr)

        self.asarray = lambda a: np.asarray(a).view(Arr)
        self.zeros = lambda n, dtype: np.zeros(n, dtype).view(Arr)
        self.cuda = types.SimpleNamespace(
            Event=Event,
            Device=lambda: types.SimpleNamespace(synchronize=lambda: None),
            get_elapsed_time=lambda a, b: b.t - a.t,
            runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
        )
        self.sparse = types.SimpleNamespace(csr_matrix=Csr)


class TimingLoop(unittest.TestCase):
    def test_rows_come_out_with_cupy_times_and_raw_marked_missing(self):
        import types

        fake = FakeCupy()
        names = ["cupyx", "cupyx.scipy", "cupyx.scipy.sparse"]
        mods = [types.ModuleType(n) for n in names[:2]] + [fake.sparse]
        mods[0].scipy, mods[1].sparse = mods[1], mods[2]
        saved = {n: sys.modules.get(n) for n in names}
        sys.modules.update(dict(zip(names, mods)))
        try:
            args = cb.parse_args(["--samples", "3", "--warmup", "1"])
            host = cb.read_csr(os.path.join(DATA, "HB__can_229.mtx.gz"))
            err = io.StringIO()
            with redirect_stderr(err):
                row, raw_ok = cb.bench_one(fake, "HB__can_229", host, "f64", args)
        finally:
            for n, m in saved.items():
                if m is None:
                    sys.modules.pop(n, None)
                else:
                    sys.modules[n] = m
        self.assertFalse(raw_ok)
        self.assertIn("raw cusparseSpMV unavailable", err.getvalue())
        self.assertEqual(row["nnz"], 1777)
        self.assertGreater(float(row["ms_cupy"]), 0.0)
        self.assertEqual(row["ms_spmv_raw"], "")
        self.assertEqual(set(row), set(cb.FIELDS))
        self.assertEqual((row["ms_b2b"], row["best_alg"]), ("", ""))

    def test_both_algorithms_by_a_and_b_and_the_faster_by_b(self):
        import types

        import numpy as np

        fake = FakeCupy()
        fake.cuda.Device = lambda: types.SimpleNamespace(synchronize=lambda: None)
        host = cb.read_csr(os.path.join(DATA, "HB__can_229.mtx.gz"))
        x = np.linspace(-1, 1, host.shape[1])
        want = host @ x
        y = np.zeros(host.shape[0])

        class FakeRaw:
            """alg1 answers right in 3 ms per graph call, alg2 in 2 ms; an
            algorithm named `refused` fails as a library without it would."""

            graph = {"alg1": 3.0, "alg2": 2.0}

            def __init__(self, cupy, a, xx, yy, names):
                suffix = {n: s for s, ns in cb.ALGORITHMS for n in ns}[names[0]]
                if suffix in FakeRaw.refused:
                    raise KeyError("not in the bindings")
                self.suffix = suffix

            def __call__(self):
                y[:] = want

            def graph_ms(self, cupy, calls, samples, warmup):
                assert calls == 100
                self()  # the replayed calls write y too
                return FakeRaw.graph[self.suffix]

        checked = []

        def check(label, got):
            checked.append(label)
            np.testing.assert_allclose(got, want)

        saved = cb.RawSpMV
        cb.RawSpMV = FakeRaw
        try:
            args = cb.parse_args(["--samples", "3", "--warmup", "1"])
            # y on the "device": filled, read back with .get() as CuPy's is.
            yy = types.SimpleNamespace(fill=y.fill, get=lambda: y.copy())
            for refused, best in [((), "alg2"), (("alg2",), "alg1"), (("alg1", "alg2"), "")]:
                FakeRaw.refused = refused
                row = {"matrix": "m", "precision": "f64"}
                err = io.StringIO()
                with redirect_stderr(err):
                    ok = cb.bench_algorithms(fake, None, x, yy, check, row, args)
                self.assertEqual(ok, best != "", refused)
                self.assertEqual(row["best_alg"], best, refused)
                for suffix in ("alg1", "alg2"):
                    timed = suffix not in refused
                    self.assertEqual(row[f"ms_graph100_{suffix}"] != "", timed, row)
                    self.assertEqual(row[f"ms_call_{suffix}"] != "", timed, row)
                    if not timed:
                        self.assertIn(f"{suffix} not timed", err.getvalue())
                if best:
                    self.assertEqual(float(row["ms_b2b"]), FakeRaw.graph[best])
                    self.assertEqual(row["ms_call"], row[f"ms_call_{best}"])
                else:
                    self.assertEqual(row["ms_b2b"], "")
        finally:
            cb.RawSpMV = saved
        self.assertIn("cusparseSpMV alg2 replayed from the CUDA graph", checked)


if __name__ == "__main__":
    unittest.main()
