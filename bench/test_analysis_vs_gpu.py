"""Tests of analysis_vs_gpu.py (no GPU or device needed)."""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis_vs_gpu as av  # noqa: E402

OVERHEAD = """matrix,family,precision,rows,nnz,scheme,plan,features_ms,predict_ms,binning_ms,spmv_ms,spmv_equivalents
gen:stencil2d:4M,gen:stencil2d,f32,801025,4001545,50000,single [0:serial],0.090,0.002,0.002,3.1,0.03
gen:road_like:4M,gen:road_like,f64,1,3892602,200000,single [0:serial],0.300,0.004,0.002,2.0,0.15
gen:lp_like:4M,gen:lp_like,f64,1,3858086,200000,single [0:serial],0.050,0.001,0.000,2.6,0.02
/m/HB__can_229.mtx.gz,HB,f64,229,1777,single,single [0:serial],0.001,0.001,0.000,0.01,0.2
"""

CAMPAIGN = """matrix,kernel,precision,nnz,median_ms,min_ms,spread,reps,gbps,bound_fraction,gflops,err_vs_bound,ok,ci_rel,converged
gen:stencil2d:4000000,serial,f32,4001545,0.020,0.019,0.1,10,1,0.1,1,0,true,0.01,true
gen:stencil2d:4000000,vector,f32,4001545,0.010,0.009,0.1,10,1,0.1,1,0,false,0.01,true
gen:stencil2d:4000000,merge_path,f32,4001545,0.040,0.039,0.1,10,1,0.1,1,0,true,0.01,true
gen:stencil2d:4000000,cpu_parallel,f32,4001545,0.001,0.001,0.1,10,1,0.1,1,0,true,0.01,true
gen:road_like:4000000,serial,f64,3892602,0.030,0.029,0.1,10,1,0.1,1,0,true,0.01,true
gen:road_like:4000000,serial,f32,3892602,0.001,0.001,0.1,10,1,0.1,1,0,true,0.01,true
"""


def run(overhead, campaign):
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "o.csv"), os.path.join(d, "c.csv")
        with open(a, "w") as f:
            f.write(overhead)
        with open(b, "w") as f:
            f.write(campaign)
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = av.main(["analysis_vs_gpu.py", a, b])
        return rc, out.getvalue(), err.getvalue()


class AnalysisVsGpu(unittest.TestCase):
    def test_keys_of_both_namings_agree(self):
        self.assertEqual(av.generated_key("gen:road_like:4M"), ("road_like", 4_000_000))
        self.assertEqual(av.generated_key("gen:road_like:4000000"), ("road_like", 4_000_000))
        self.assertEqual(av.generated_key("gen:stencil2d:300K"), ("stencil2d", 300_000))
        self.assertIsNone(av.generated_key("HB__can_229"))
        self.assertIsNone(av.generated_key("/m/x.mtx"))

    def test_joins_by_matrix_and_precision_on_the_fastest_device_time_that_checked(self):
        rc, out, err = run(OVERHEAD, CAMPAIGN)
        self.assertEqual(rc, 0)
        rows = out.strip().splitlines()
        self.assertEqual(rows[0], "matrix,precision,host_analysis_ms,device_best_ms,spmv_equivalents")
        # stencil2d f32: the failed vector timing and the CPU kernel are left out,
        # so serial's 0.020 ms is the best; (0.090 + 0.002 + 0.002) / 0.020 = 4.70.
        self.assertIn("gen:stencil2d:4M,f32,0.0940,0.0200,4.70", rows)
        # road_like f64 joins its f64 timing only (not f32's 0.001 ms).
        self.assertIn("gen:road_like:4M,f64,0.3060,0.0300,10.20", rows)
        # lp_like has no device timing and the real matrix is not generated.
        self.assertEqual(len(rows), 3)
        self.assertIn("worst: gen:road_like:4M f64 at 10.20", err)

    def test_no_matrix_in_common_is_an_error(self):
        rc, out, err = run(OVERHEAD, CAMPAIGN.splitlines()[0] + "\n")
        self.assertEqual(rc, 1)
        self.assertIn("no generated matrix", err)

    def test_wrong_arguments_are_a_usage_error(self):
        err = io.StringIO()
        with redirect_stderr(err):
            self.assertEqual(av.main(["analysis_vs_gpu.py"]), 2)


if __name__ == "__main__":
    unittest.main()
