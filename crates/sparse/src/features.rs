//! Matrix features: the paper's Table I (M, N, NNZ, row-length mean, variance,
//! min, max) plus what its Section IV-C asks for (row-length histogram, empty
//! rows, share of nonzeros in long rows, column locality), in one fixed order.

use crate::binning::MAX_BIN;
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
/// | `rows_lt_2` ... `rows_lt_32` | fraction of rows shorter than 2, 4, 8, 16, 32 (the subvector widths: rows that leave work-items idle) |
/// | `row_len_jump` | mean `|len(r+1) - len(r)|` over neighbouring rows (within blocks of 4096 rows), divided by the mean row length (0 when that is 0): how unlike the rows sharing a virtual row are |
/// | `vrow32_within_var` | share of the row-length variance that lies inside groups of 32 neighbouring rows (virtual rows of U = 32) rather than between them (0 when the variance is 0) |
/// | `x_lines_per_nnz` | distinct groups of 16 consecutive columns (a 64-byte line of `x` in f32) per nonzero, summed over rows (0 without entries) |
/// | `len_bins` | distinct values of `min(row length, 99)`: the launches a one-launch-per-bin plan needs at U = 1 |
///
/// `row_len_jump`, `vrow32_within_var`, `x_lines_per_nnz` and `len_bins` are
/// read from the blocks `col_dist_mean` samples (all rows below 2^19 entries).
/// | `bins_u10`, `bins_u100`, `bins_u1000` | non-empty bins of the binning at U = 10, 100, 1000 (launches of a plan launched per bin) |
///
/// Features are only ever appended to this list, so that a model records a
/// prefix of it and reads exactly the features it was trained on.
pub const FEATURE_NAMES: [&str; 15 + HIST_BUCKETS + 12] = [
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
    "rows_lt_2",
    "rows_lt_4",
    "rows_lt_8",
    "rows_lt_16",
    "rows_lt_32",
    "row_len_jump",
    "vrow32_within_var",
    "x_lines_per_nnz",
    "len_bins",
    "bins_u10",
    "bins_u100",
    "bins_u1000",
];

/// Number of names in the feature list of models fitted before the appended
/// features (the paper's statistics, locality and the histogram).
pub const FEATURES_V1_LEN: usize = 15 + HIST_BUCKETS;

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
        let mut v = acc.base_values(nrows, ncols, col_idx.len());
        v.extend(acc.appended_values(nrows));
        v.extend([10, 100, 1000].map(|u| nonempty_bins(row_ptr, u)));
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

/// Rows per block of the feature pass: each block is folded into one
/// accumulator in place (folding row by row would move the accumulator,
/// histogram included, once per row). A multiple of 32, so that the groups of
/// `vrow32_within_var` never straddle two blocks.
const BLOCK: usize = 4096;

/// Rows per group of `vrow32_within_var`.
const GROUP: usize = 32;

/// What one block of rows contributes to the features.
#[derive(Clone, Copy)]
struct Acc {
    min: usize,
    max: usize,
    sumsq: u128,
    empty: usize,
    long_nnz: usize,
    dist: f64,
    dist_nnz: usize,
    lines: usize,
    band: u64,
    hist: [usize; HIST_BUCKETS],
    jump: u64,
    within_ss: f64,
    len_seen: u128,
    shape_blocks: usize,
    shape_rows: usize,
    shape_sum: f64,
    shape_sumsq: f64,
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
        lines: 0,
        band: 0,
        hist: [0; HIST_BUCKETS],
        jump: 0,
        within_ss: 0.0,
        len_seen: 0,
        shape_blocks: 0,
        shape_rows: 0,
        shape_sum: 0.0,
        shape_sumsq: 0.0,
    };

    fn merge(mut self, b: Acc) -> Acc {
        self.min = self.min.min(b.min);
        self.max = self.max.max(b.max);
        self.sumsq += b.sumsq;
        self.empty += b.empty;
        self.long_nnz += b.long_nnz;
        self.dist += b.dist;
        self.dist_nnz += b.dist_nnz;
        self.lines += b.lines;
        self.band = self.band.max(b.band);
        for i in 0..HIST_BUCKETS {
            self.hist[i] += b.hist[i];
        }
        self.jump += b.jump;
        self.within_ss += b.within_ss;
        self.len_seen |= b.len_seen;
        self.shape_blocks += b.shape_blocks;
        self.shape_rows += b.shape_rows;
        self.shape_sum += b.shape_sum;
        self.shape_sumsq += b.shape_sumsq;
        self
    }

    /// The first [`FEATURES_V1_LEN`] features.
    fn base_values(&self, nrows: usize, ncols: usize, nnz: usize) -> Vec<f64> {
        let m = nrows.max(1) as f64;
        let mean = nnz as f64 / m;
        let min = if nrows == 0 { 0 } else { self.min };
        let var = self.variance(nrows, nnz);
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

    /// Population variance from exact integer sums: E[len^2] - mean^2.
    fn variance(&self, nrows: usize, nnz: usize) -> f64 {
        if nrows == 0 {
            return 0.0;
        }
        let mean = nnz as f64 / nrows as f64;
        (self.sumsq as f64 / nrows as f64 - mean * mean).max(0.0)
    }

    /// The appended features up to `len_bins` (the `bins_u*` come from the row
    /// pointer alone).
    fn appended_values(&self, nrows: usize) -> Vec<f64> {
        let m = nrows.max(1) as f64;
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        // Rows shorter than 2^k are the buckets below bucket k.
        let mut v: Vec<f64> = (1..=5)
            .map(|k| self.hist[..=k].iter().sum::<usize>() as f64 / m)
            .collect();
        // The shape statistics come from the sampled blocks.
        let pairs = (self.shape_rows - self.shape_blocks) as f64;
        let sampled_mean = ratio(self.shape_sum, self.shape_rows as f64);
        v.push(ratio(ratio(self.jump as f64, pairs), sampled_mean));
        let total_ss = self.shape_sumsq - self.shape_sum * sampled_mean;
        // Sums of whole numbers: a spread below rounding is no spread.
        let total_ss = if total_ss > 1e-9 * self.shape_sumsq {
            total_ss
        } else {
            0.0
        };
        v.push(ratio(self.within_ss, total_ss).clamp(0.0, 1.0));
        v.push(ratio(self.lines as f64, self.dist_nnz as f64));
        v.push(self.len_seen.count_ones() as f64);
        v
    }
}

/// The block pass over rows: length statistics, histogram, neighbour and group
/// statistics on every row, locality on sampled blocks.
struct RowPass<'a> {
    nrows: usize,
    row_ptr: &'a [u32],
    col_idx: &'a [u32],
    long_len: usize,
    /// Column locality is read from every `stride`-th block once the matrix is
    /// large (about 2^19 entries read at most), so that the analysis stays well
    /// under the cost of one SpMV; everything else is exact.
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

    fn len(&self, r: usize) -> usize {
        (self.row_ptr[r + 1] - self.row_ptr[r]) as usize
    }

    fn block(&self, b: usize) -> Acc {
        let mut a = Acc::ZERO;
        let rows = b * BLOCK..((b + 1) * BLOCK).min(self.nrows);
        let mut sq = 0u64;
        for r in rows.clone() {
            let len = self.len(r);
            a.min = a.min.min(len);
            a.max = a.max.max(len);
            sq += (len * len) as u64;
            a.empty += usize::from(len == 0);
            a.long_nnz += if len > self.long_len { len } else { 0 };
            a.hist[hist_bucket(len)] += 1;
        }
        a.sumsq = sq as u128;
        let sampled = b.is_multiple_of(self.stride);
        if sampled {
            self.shape(&mut a, rows.clone());
        }
        self.locality(&mut a, rows, sampled);
        a
    }

    /// Row-length shape on a sampled block: neighbour jumps, spread inside
    /// groups of [`GROUP`] rows (virtual rows of U = 32) and distinct lengths.
    fn shape(&self, a: &mut Acc, rows: std::ops::Range<usize>) {
        let mut prev = self.len(rows.start);
        a.shape_blocks += 1;
        for start in rows.clone().step_by(GROUP) {
            let end = (start + GROUP).min(rows.end);
            let (mut gs, mut gsq) = (0u64, 0u64);
            for r in start..end {
                let len = self.len(r);
                gs += len as u64;
                gsq += (len * len) as u64;
                a.len_seen |= 1u128 << len.min(MAX_BIN);
                a.jump += len.abs_diff(prev) as u64;
                prev = len;
            }
            a.shape_rows += end - start;
            a.shape_sum += gs as f64;
            a.shape_sumsq += gsq as f64;
            a.within_ss += gsq as f64 - (gs as f64) * (gs as f64) / (end - start) as f64;
        }
    }

    /// Bandwidth on every row; distance to the diagonal and lines of `x` on a
    /// sampled block.
    fn locality(&self, a: &mut Acc, rows: std::ops::Range<usize>, sampled: bool) {
        for r in rows {
            let (s, e) = (self.row_ptr[r] as usize, self.row_ptr[r + 1] as usize);
            if e == s {
                continue;
            }
            let cols = &self.col_idx[s..e];
            // Rows are sorted: the farthest entry is the first or the last.
            let (first, last) = (cols[0] as i64, cols[e - s - 1] as i64);
            let ri = r as i64;
            a.band = a
                .band
                .max((first - ri).unsigned_abs().max((last - ri).unsigned_abs()));
            if sampled {
                // A plain sum the compiler can vectorise.
                let rowdist: i64 = cols.iter().map(|&c| (c as i64 - ri).abs()).sum();
                a.dist += rowdist as f64;
                a.dist_nnz += e - s;
                // Lines of 16 columns: one, plus each step into another line
                // (written as a sum the compiler can vectorise).
                let steps: u32 = cols[1..]
                    .iter()
                    .zip(cols)
                    .map(|(&c, &p)| u32::from((c ^ p) >> 4 != 0))
                    .sum();
                a.lines += 1 + steps as usize;
            }
        }
    }
}

/// Non-empty bins of the binning at granularity `u` (as `Binning::new` bins:
/// virtual row `i` covers rows `[iu, (i+1)u)`, its bin is
/// `min(workload / u, 99)`), from the row pointer alone.
fn nonempty_bins(row_ptr: &[u32], u: usize) -> f64 {
    let nrows = row_ptr.len().saturating_sub(1);
    let mut seen = 0u128;
    let mut start = 0;
    while start < nrows {
        let end = (start + u).min(nrows);
        let wl = (row_ptr[end] - row_ptr[start]) as usize;
        seen |= 1u128 << (wl / u).min(MAX_BIN);
        start = end;
    }
    seen.count_ones() as f64
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
        // Lengths 2, 0, 4: shorter than 2: one row; than 4 and more: two, three.
        assert!((f.get("rows_lt_2").unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert!((f.get("rows_lt_4").unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(f.get("rows_lt_8"), Some(1.0));
        assert_eq!(f.get("rows_lt_32"), Some(1.0));
        // |0 - 2| + |4 - 0| = 6 over 2 neighbouring pairs, / mean 2.
        assert_eq!(f.get("row_len_jump"), Some(1.5));
        // One group of 3 rows holds all the variance.
        assert!((f.get("vrow32_within_var").unwrap() - 1.0).abs() < 1e-12);
        // Columns 0, 2 (one line of 16) and 0..3 (one line): 2 lines / 6 entries.
        assert!((f.get("x_lines_per_nnz").unwrap() - 2.0 / 6.0).abs() < 1e-12);
        assert_eq!(f.get("len_bins"), Some(3.0));
        // U = 10 and more: one virtual row of 6 nonzeros, bin 0.
        assert_eq!(f.get("bins_u10"), Some(1.0));
        assert_eq!(f.get("bins_u1000"), Some(1.0));
    }

    #[test]
    fn appended_features_of_groups_and_lines() {
        // 64 rows: the first 32 of length 1, the next 32 of length 3, so the
        // groups of 32 rows are uniform: no variance inside a group. Row r's
        // columns step by 16, so every entry is its own line of x.
        let (mut rp, mut ci) = (vec![0u32], Vec::new());
        for r in 0..64u32 {
            let len = if r < 32 { 1 } else { 3 };
            ci.extend((0..len).map(|j| j * 16));
            rp.push(ci.len() as u32);
        }
        let f = Features::of_pattern(64, 64, &rp, &ci);
        assert_eq!(f.get("vrow32_within_var"), Some(0.0));
        assert_eq!(f.get("x_lines_per_nnz"), Some(1.0));
        // One jump of 2 over 63 pairs, / mean 2.
        assert!((f.get("row_len_jump").unwrap() - 1.0 / 63.0).abs() < 1e-12);
        assert_eq!(f.get("rows_lt_2"), Some(0.5));
        assert_eq!(f.get("rows_lt_4"), Some(1.0));
        assert_eq!(f.get("len_bins"), Some(2.0));
    }

    #[test]
    fn launch_counts_equal_the_binning() {
        use crate::{Binning, Scheme};
        // Lengths spread from 0 to a few hundred, so the bins differ by U.
        let n = 7000;
        let (mut rp, mut ci) = (vec![0u32], Vec::new());
        for r in 0..n {
            let len = (r * r * 7 + r * 13) % 311 * usize::from(r % 5 != 0);
            ci.extend(
                (0..len as u32)
                    .map(|j| j * 3 % 4000)
                    .collect::<std::collections::BTreeSet<_>>(),
            );
            rp.push(ci.len() as u32);
        }
        let f = Features::of_pattern(n, 4000, &rp, &ci);
        for (u, name) in [(10, "bins_u10"), (100, "bins_u100"), (1000, "bins_u1000")] {
            let b = Binning::new(&rp, Scheme::Granularity(u));
            assert_eq!(
                f.get(name),
                Some(b.nonempty_bins().count() as f64),
                "{name}"
            );
        }
        let b1 = Binning::new(&rp, Scheme::Granularity(1));
        assert_eq!(f.get("len_bins"), Some(b1.nonempty_bins().count() as f64));
    }

    #[test]
    fn the_first_features_are_those_older_models_read() {
        assert_eq!(FEATURE_NAMES[FEATURES_V1_LEN - 1], "hist_ge_65536");
        assert_eq!(FEATURE_NAMES[FEATURES_V1_LEN], "rows_lt_2");
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
