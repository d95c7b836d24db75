//! Matrix features: the paper's Table I (M, N, NNZ, row-length mean, variance,
//! min, max) plus what its Section IV-C asks for (row-length histogram, empty
//! rows, share of nonzeros in long rows, column locality), in one fixed order.

use crate::{Csr, Scalar};
use rayon::prelude::*;
use std::collections::BTreeMap;

/// Number of log2 row-length histogram buckets: `0`, `1`, `[2,4)`, ..., `[2^15, 2^16)`, `>= 2^16`.
pub const HIST_BUCKETS: usize = 18;

/// The names of the feature vector, in its fixed order. Models store this list
/// and refuse to load when it differs.
///
/// | name | meaning |
/// |---|---|
/// | `rows`, `cols`, `nnz` | M, N, NNZ |
/// | `nnz_row_mean`, `nnz_row_var` | mean and population variance of row lengths |
/// | `nnz_row_min`, `nnz_row_max` | shortest and longest row |
/// | `nnz_row_cv` | standard deviation / mean of row lengths (0 when mean is 0) |
/// | `nnz_row_max_over_mean` | longest row / mean (0 when mean is 0) |
/// | `empty_rows`, `empty_row_frac` | count and fraction of rows with no entry |
/// | `long_row_nnz_share` | share of nonzeros in rows longer than 4x the mean |
/// | `col_dist_mean` | mean of `|c - r|` over entries, divided by `cols` (locality of x); above 2^19 nonzeros, over evenly spaced blocks of 4096 rows holding about 2^19 entries |
/// | `bandwidth_frac` | `max |c - r|` over entries, divided by `cols` |
/// | `density` | `nnz / (rows * cols)` |
/// | `hist_*` | fraction of rows whose length falls in each log2 bucket |
pub const FEATURE_NAMES: [&str; 15 + HIST_BUCKETS] = [
    "rows",
    "cols",
    "nnz",
    "nnz_row_mean",
    "nnz_row_var",
    "nnz_row_min",
    "nnz_row_max",
    "nnz_row_cv",
    "nnz_row_max_over_mean",
    "empty_rows",
    "empty_row_frac",
    "long_row_nnz_share",
    "col_dist_mean",
    "bandwidth_frac",
    "density",
    "hist_0",
    "hist_1",
    "hist_2_3",
    "hist_4_7",
    "hist_8_15",
    "hist_16_31",
    "hist_32_63",
    "hist_64_127",
    "hist_128_255",
    "hist_256_511",
    "hist_512_1023",
    "hist_1024_2047",
    "hist_2048_4095",
    "hist_4096_8191",
    "hist_8192_16383",
    "hist_16384_32767",
    "hist_32768_65535",
    "hist_ge_65536",
];

/// Histogram bucket of a row of length `len`.
pub fn hist_bucket(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        ((usize::BITS - len.leading_zeros()) as usize).min(HIST_BUCKETS - 1)
    }
}

/// A feature vector in the order of [`FEATURE_NAMES`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Features {
    /// Values, one per name in [`FEATURE_NAMES`].
    pub values: Vec<f64>,
}

/// Rows plus nonzeros read below which the feature pass runs on the
/// calling thread (about 0.2 ms of work).
const SEQUENTIAL_BELOW: usize = 1 << 18;

/// Rows per block of the feature pass: each block is folded into one
/// accumulator in place (folding row by row would move the accumulator,
/// histogram included, once per row).
const BLOCK: usize = 4096;

/// What one block of rows contributes to the features: one pass over rows
/// gives length statistics, the histogram and column locality.
#[derive(Clone, Copy)]
struct Acc {
    min: usize,
    max: usize,
    sumsq: u128,
    empty: usize,
    long_nnz: usize,
    dist: f64,
    dist_nnz: usize,
    band: u64,
    hist: [usize; HIST_BUCKETS],
}

impl Acc {
    const ZERO: Acc = Acc {
        min: usize::MAX,
        max: 0,
        sumsq: 0,
        empty: 0,
        long_nnz: 0,
        dist: 0.0,
        dist_nnz: 0,
        band: 0,
        hist: [0; HIST_BUCKETS],
    };

    fn merge(mut self, b: Acc) -> Acc {
        self.min = self.min.min(b.min);
        self.max = self.max.max(b.max);
        self.sumsq += b.sumsq;
        self.empty += b.empty;
        self.long_nnz += b.long_nnz;
        self.dist += b.dist;
        self.dist_nnz += b.dist_nnz;
        self.band = self.band.max(b.band);
        for i in 0..HIST_BUCKETS {
            self.hist[i] += b.hist[i];
        }
        self
    }

    /// The feature vector, in the order of [`FEATURE_NAMES`].
    fn values(&self, nrows: usize, ncols: usize, nnz: usize) -> Vec<f64> {
        let m = nrows.max(1) as f64;
        let mean = nnz as f64 / m;
        let min = if nrows == 0 { 0 } else { self.min };
        // Population variance from exact integer sums: E[len^2] - mean^2.
        let var = if nrows == 0 {
            0.0
        } else {
            (self.sumsq as f64 / nrows as f64 - mean * mean).max(0.0)
        };
        let n = ncols.max(1) as f64;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let mut v = vec![
            nrows as f64,
            ncols as f64,
            nnz as f64,
            mean,
            var,
            min as f64,
            self.max as f64,
            ratio(var.sqrt(), mean),
            ratio(self.max as f64, mean),
            self.empty as f64,
            self.empty as f64 / m,
            ratio(self.long_nnz as f64, nnz as f64),
            ratio(self.dist, self.dist_nnz as f64) / n,
            self.band as f64 / n,
            nnz as f64 / (m * n),
        ];
        v.extend(self.hist.iter().map(|&h| h as f64 / m));
        v
    }
}

/// The pattern one feature pass reads, with what every block needs.
struct RowPass<'a> {
    nrows: usize,
    row_ptr: &'a [u32],
    col_idx: &'a [u32],
    /// Rows longer than this (4x the mean) count as long.
    long_len: usize,
    /// Column locality is estimated from every `stride`-th block of rows once
    /// the matrix is large (about 2^19 entries read at most), so that the
    /// analysis stays well under the cost of one SpMV; everything else is exact.
    stride: usize,
}

impl<'a> RowPass<'a> {
    fn new(nrows: usize, row_ptr: &'a [u32], col_idx: &'a [u32]) -> Self {
        let nnz = col_idx.len();
        let mean = nnz as f64 / nrows.max(1) as f64;
        let nblocks = nrows.div_ceil(BLOCK);
        RowPass {
            nrows,
            row_ptr,
            col_idx,
            long_len: (4.0 * mean).floor() as usize,
            stride: nnz.div_ceil(1 << 19).clamp(1, nblocks.max(1)),
        }
    }

    /// The accumulator of block `b`: lengths first, then column locality.
    fn block(&self, b: usize) -> Acc {
        let (row_ptr, col_idx) = (self.row_ptr, self.col_idx);
        let mut a = Acc::ZERO;
        let rows = b * BLOCK..((b + 1) * BLOCK).min(self.nrows);
        let mut sq = 0u64;
        for r in rows.clone() {
            let len = (row_ptr[r + 1] - row_ptr[r]) as usize;
            a.min = a.min.min(len);
            a.max = a.max.max(len);
            sq += (len * len) as u64;
            a.empty += usize::from(len == 0);
            a.long_nnz += if len > self.long_len { len } else { 0 };
            a.hist[hist_bucket(len)] += 1;
        }
        a.sumsq = sq as u128;
        for r in rows {
            let (s, e) = (row_ptr[r] as usize, row_ptr[r + 1] as usize);
            if e > s {
                // Rows are sorted: the farthest entry is the first or the last.
                let (first, last) = (col_idx[s] as i64, col_idx[e - 1] as i64);
                let ri = r as i64;
                a.band = a
                    .band
                    .max((first - ri).unsigned_abs().max((last - ri).unsigned_abs()));
                if b.is_multiple_of(self.stride) {
                    // A plain sum the compiler can vectorise.
                    let rowdist: i64 = col_idx[s..e].iter().map(|&c| (c as i64 - ri).abs()).sum();
                    a.dist += rowdist as f64;
                    a.dist_nnz += e - s;
                }
            }
        }
        a
    }
}

impl Features {
    /// Computes the features of a matrix (its pattern only; values are not read).
    pub fn of<T: Scalar>(a: &Csr<T>) -> Self {
        Self::of_pattern(a.nrows(), a.ncols(), a.row_ptr(), a.col_idx())
    }

    /// Computes the features from the CSR pattern arrays.
    pub fn of_pattern(nrows: usize, ncols: usize, row_ptr: &[u32], col_idx: &[u32]) -> Self {
        let parallel = nrows + col_idx.len().min(1 << 19) >= SEQUENTIAL_BELOW;
        Self::of_pattern_on(nrows, ncols, row_ptr, col_idx, parallel)
    }

    /// [`Features::of_pattern`] on the thread pool or on this thread.
    fn of_pattern_on(
        nrows: usize,
        ncols: usize,
        row_ptr: &[u32],
        col_idx: &[u32],
        parallel: bool,
    ) -> Self {
        let pass = RowPass::new(nrows, row_ptr, col_idx);
        let nblocks = nrows.div_ceil(BLOCK);
        // A small matrix is read on this thread: waking the thread pool costs
        // more than the pass (tens of microseconds, much more on a busy
        // machine), which a first call would pay in full.
        let acc = if !parallel {
            (0..nblocks)
                .map(|b| pass.block(b))
                .fold(Acc::ZERO, Acc::merge)
        } else {
            (0..nblocks)
                .into_par_iter()
                .map(|b| pass.block(b))
                .reduce(|| Acc::ZERO, Acc::merge)
        };
        let v = acc.values(nrows, ncols, col_idx.len());
        debug_assert_eq!(v.len(), FEATURE_NAMES.len());
        Features { values: v }
    }

    /// The value of a named feature, if the name exists.
    pub fn get(&self, name: &str) -> Option<f64> {
        FEATURE_NAMES
            .iter()
            .position(|n| *n == name)
            .and_then(|i| self.values.get(i).copied())
    }

    /// Name -> value, for JSON output.
    pub fn to_map(&self) -> BTreeMap<String, f64> {
        FEATURE_NAMES
            .iter()
            .zip(&self.values)
            .map(|(n, v)| (n.to_string(), *v))
            .collect()
    }

    /// Pairs of (name, value) in the fixed order.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, f64)> + '_ {
        FEATURE_NAMES
            .iter()
            .copied()
            .zip(self.values.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pass_on_this_thread_equals_the_parallel_one() {
        // 20 blocks of rows with varied lengths and spread columns.
        let n = 20 * 4096 + 17;
        let (mut rp, mut ci) = (vec![0u32], Vec::new());
        for r in 0..n {
            let len = (r * 7919) % 23;
            let mut cols: Vec<u32> = (0..len).map(|j| ((r * 31 + j * 977) % n) as u32).collect();
            cols.sort_unstable();
            cols.dedup();
            ci.extend(cols);
            rp.push(ci.len() as u32);
        }
        let par = Features::of_pattern_on(n, n, &rp, &ci, true);
        let seq = Features::of_pattern_on(n, n, &rp, &ci, false);
        assert_eq!(par, seq);
        assert_eq!(par, Features::of_pattern(n, n, &rp, &ci));
    }

    #[test]
    fn buckets() {
        assert_eq!(hist_bucket(0), 0);
        assert_eq!(hist_bucket(1), 1);
        assert_eq!(hist_bucket(2), 2);
        assert_eq!(hist_bucket(3), 2);
        assert_eq!(hist_bucket(4), 3);
        assert_eq!(hist_bucket(65535), 16);
        assert_eq!(hist_bucket(65536), 17);
        assert_eq!(hist_bucket(usize::MAX), 17);
    }

    #[test]
    fn features_of_a_fixture() {
        // [1 0 2 0]
        // [0 0 0 0]
        // [3 4 5 6]
        let a = Csr::<f64>::try_new(
            3,
            4,
            vec![0, 2, 2, 6],
            vec![0, 2, 0, 1, 2, 3],
            vec![1., 2., 3., 4., 5., 6.],
        )
        .unwrap();
        let f = Features::of(&a);
        assert_eq!(f.get("rows"), Some(3.0));
        assert_eq!(f.get("cols"), Some(4.0));
        assert_eq!(f.get("nnz"), Some(6.0));
        assert_eq!(f.get("nnz_row_mean"), Some(2.0));
        // lengths 2, 0, 4: var = (0 + 4 + 4) / 3
        assert!((f.get("nnz_row_var").unwrap() - 8.0 / 3.0).abs() < 1e-12);
        assert_eq!(f.get("nnz_row_min"), Some(0.0));
        assert_eq!(f.get("nnz_row_max"), Some(4.0));
        assert_eq!(f.get("empty_rows"), Some(1.0));
        assert!((f.get("empty_row_frac").unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(f.get("long_row_nnz_share"), Some(0.0));
        // |c - r|: row 0: 0, 2; row 2: 2, 1, 0, 1 -> 6 / 6 entries / 4 cols
        assert!((f.get("col_dist_mean").unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(f.get("bandwidth_frac"), Some(0.5));
        assert_eq!(f.get("density"), Some(0.5));
        assert!((f.get("hist_0").unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert!((f.get("hist_2_3").unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert!((f.get("hist_4_7").unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(f.values.len(), FEATURE_NAMES.len());
    }

    #[test]
    fn features_of_empty_and_long_row() {
        let e = Features::of(&Csr::<f32>::zeros(0, 0).unwrap());
        assert!(e.values.iter().all(|v| v.is_finite()));
        assert_eq!(e.get("nnz"), Some(0.0));
        // One row of 100 among 99 rows of 1: mean 1.99, 100 > 4 * 1.99.
        let mut rp = vec![0u32];
        let mut ci = Vec::new();
        for r in 0..100u32 {
            let len = if r == 0 { 100 } else { 1 };
            ci.extend(0..len);
            rp.push(ci.len() as u32);
        }
        let v = vec![1.0f64; ci.len()];
        let a = Csr::try_new(100, 100, rp, ci, v).unwrap();
        let f = Features::of(&a);
        assert!((f.get("long_row_nnz_share").unwrap() - 100.0 / 199.0).abs() < 1e-12);
        assert_eq!(f.get("nnz_row_max"), Some(100.0));
    }
}
