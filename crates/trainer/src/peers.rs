//! What the report sets beside our times: cuSPARSE's figures (the CSV written by
//! `bench/cusparse_bench.py`) and the copy-bandwidth bound of each matrix.

use crate::evaluate::EvalRow;
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::path::Path;
use store::Precision;

/// The columns of `bench/cusparse_bench.py`'s CSV this module reads.
#[derive(serde::Deserialize)]
struct CusparseLine {
    matrix: String,
    precision: String,
    #[serde(deserialize_with = "csv::invalid_option")]
    ms_cupy: Option<f64>,
    #[serde(deserialize_with = "csv::invalid_option")]
    ms_spmv_raw: Option<f64>,
    /// Absent from CSVs written before the CUDA-graph figure existed.
    #[serde(default, deserialize_with = "csv::invalid_option")]
    ms_spmv_graph: Option<f64>,
}

/// cuSPARSE times by (matrix name, precision): (`cusparseSpMV` ms, CuPy `A @ x` ms).
/// The `cusparseSpMV` figure is the CUDA-graph replay where the CSV has one (the
/// library's kernel cost, comparable with our OpenCL kernel times), else the
/// back-to-back calls from Python.
#[derive(Debug, Default, Clone)]
pub struct CusparseTable(pub HashMap<(String, String), (f64, f64)>);

impl CusparseTable {
    /// Reads the CSV of `bench/cusparse_bench.py` (columns `matrix`, `precision`,
    /// `ms_cupy`, `ms_spmv_raw`, optional `ms_spmv_graph`; others ignored). Empty or unreadable cells read
    /// as unknown.
    pub fn load(path: &Path) -> Result<CusparseTable> {
        let mut r = csv::Reader::from_path(path)
            .with_context(|| format!("reading cuSPARSE figures {}", path.display()))?;
        let mut t = HashMap::new();
        for line in r.deserialize::<CusparseLine>() {
            let l = line.with_context(|| format!("reading {}", path.display()))?;
            let ms = |v: Option<f64>| v.unwrap_or(f64::NAN);
            let kernel = l.ms_spmv_graph.or(l.ms_spmv_raw);
            t.insert((l.matrix, l.precision), (ms(kernel), ms(l.ms_cupy)));
        }
        Ok(CusparseTable(t))
    }

    /// The figures of a matrix in a precision.
    pub fn get(&self, matrix: &str, precision: Precision) -> Option<(f64, f64)> {
        self.0
            .get(&(matrix.to_string(), precision.as_str().to_string()))
            .copied()
    }
}

/// The copy-bandwidth bound of one SpMV in ms: the minimum bytes moved (matrix
/// arrays read once, x read once, y written once) at `copy_gbps`.
pub fn bound_ms(
    nrows: usize,
    ncols: usize,
    nnz: usize,
    precision: Precision,
    copy_gbps: f64,
) -> f64 {
    let value_bytes = match precision {
        Precision::F32 => 4,
        Precision::F64 => 8,
    };
    let bytes = engine::min_bytes(nrows, ncols, nnz, value_bytes) as f64;
    bytes / (copy_gbps * 1e9) * 1e3
}

/// Fills the bound and cuSPARSE columns of evaluated rows.
pub fn annotate(
    rows: &mut [EvalRow],
    precision: Precision,
    copy_gbps: Option<f64>,
    cusparse: Option<&CusparseTable>,
) {
    for r in rows {
        if let Some(bw) = copy_gbps.filter(|b| *b > 0.0) {
            r.bound_ms = bound_ms(r.nrows, r.ncols, r.nnz, precision, bw);
        }
        if let Some((raw, cupy)) = cusparse.and_then(|t| t.get(&r.matrix, precision)) {
            r.cusparse_ms = raw;
            r.cusparse_cupy_ms = cupy;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table loaded from a benchmark CSV file holding `csv`.
    fn table(csv: &str) -> CusparseTable {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.csv");
        std::fs::write(&p, csv).unwrap();
        CusparseTable::load(&p).unwrap()
    }

    #[test]
    fn reads_the_benchmark_csv_and_bounds_scale_with_bytes() {
        let t = table(
            "matrix,precision,nnz,ms_cupy,ms_spmv_raw,gbps\nHB__can_229,f64,1777,0.02,0.01,3.5\nx,f32,5,,0.5,\n",
        );
        assert_eq!(t.get("HB__can_229", Precision::F64), Some((0.01, 0.02)));
        assert!(t.get("HB__can_229", Precision::F32).is_none());
        let (raw, cupy) = t.get("x", Precision::F32).unwrap();
        assert_eq!(raw, 0.5);
        assert!(cupy.is_nan());
        let b32 = bound_ms(1000, 1000, 10_000, Precision::F32, 100.0);
        let b64 = bound_ms(1000, 1000, 10_000, Precision::F64, 100.0);
        assert!(b32 > 0.0 && b64 > b32);
        assert!((bound_ms(1000, 1000, 10_000, Precision::F64, 50.0) / b64 - 2.0).abs() < 1e-12);
    }

    #[test]
    fn the_graph_figure_is_preferred_and_an_empty_one_falls_back() {
        let t = table(
            "matrix,precision,nnz,ms_cupy,ms_spmv_raw,ms_spmv_graph,gbps,calls\n\
             a,f64,10,0.04,0.012,0.005,1.0,100\nb,f64,10,0.04,0.012,,1.0,100\n",
        );
        assert_eq!(t.get("a", Precision::F64), Some((0.005, 0.04)));
        assert_eq!(t.get("b", Precision::F64), Some((0.012, 0.04)));
    }
}
