"""GPU-free tests of bench/b2b_vs_cusparse.py's join (method (b) on both sides)."""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(__file__))
import b2b_vs_cusparse as bv  # noqa: E402

BENCH = """matrix,kernel,precision,nnz,median_ms,b2b_ms,b2b_calls,ok
m1,serial,f32,200000,0.010,0.020,100,true
m1,vector,f32,200000,0.008,0.025,100,true
m1,csr_adaptive,f32,200000,0.009,0.015,100,false
m1,plan_u100_grouped(3b/1l),f32,200000,0.005,0.010,100,true
m1,cpu_parallel,f32,200000,0.500,,0,true
small,serial,f32,5000,0.004,0.018,100,true
gen:stencil2d:4000000,serial,f64,4000000,0.024,0.024,100,true
only_ours,serial,f64,300000,0.010,0.020,100,true
"""
CUSPARSE = """matrix,precision,nnz,ms_b2b,ms_call,best_alg
m1,f32,200000,0.010,0.030,alg1
small,f32,5000,0.009,0.020,alg2
gen:stencil2d:4000000,f64,4000000,0.030,0.045,alg1
only_cusparse,f32,1,0.001,0.002,alg1
failed,f64,1,,,
"""


class Join(unittest.TestCase):
    def rows(self):
        import csv

        return (list(csv.DictReader(io.StringIO(BENCH))),
                list(csv.DictReader(io.StringIO(CUSPARSE))))

    def test_plans_pay_counts_a_faster_right_plan(self):
        b, _ = self.rows()
        # m1: the grouped plan (0.010) beats the best right single kernel
        # (serial, 0.020); only_ours has no plan line, small is too small.
        self.assertEqual(bv.plans_pay(b, 100000), [("f32", 1, 2.0, 2.0, 1)])
        self.assertEqual(bv.plans_pay(b, 10**9), [])

    def test_fastest_right_single_kernel_by_b(self):
        b, c = self.rows()
        j = {(r[0], r[1]): r for r in bv.join(b, c)}
        # Not the wrong csr_adaptive, not the binned plan, not the CPU: serial by (b).
        self.assertEqual(j[("m1", "f32")][3:5], (0.020, "serial"))
        self.assertEqual(j[("m1", "f32")][5], 0.010)
        self.assertEqual(j[("m1", "f32")][6:8], (0.010, "alg1"))
        self.assertEqual(set(j), {("m1", "f32"), ("small", "f32"),
                                  ("gen:stencil2d:4000000", "f64")})

    def test_summary_counts_real_matrices_over_the_bound(self):
        with tempfile.TemporaryDirectory() as d:
            pb, pc = os.path.join(d, "b.csv"), os.path.join(d, "c.csv")
            open(pb, "w").write(BENCH)
            open(pc, "w").write(CUSPARSE)
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(bv.main([pb, pc]), 0)
            text = out.getvalue()
            self.assertIn("f32: real matrices >= 100000 nonzeros: 1, cuSPARSE/ours by (b) "
                          "geomean 0.50, worst 0.50", text)
            self.assertNotIn("f64: real", text)  # the only f64 one is generated
            self.assertIn("| gen:stencil2d:4000000 | f64 | 4000000 | 0.0240 | serial | 0.0300 | alg1 | 1.25 |",
                          text)
            open(pc, "w").write("matrix,precision,nnz,ms_b2b,ms_call,best_alg\n")
            self.assertEqual(bv.main([pb, pc]), 1)


if __name__ == "__main__":
    unittest.main()
