//! Matrix features: the paper's Table I (M, N, NNZ, row-length mean, variance,
//! min, max) plus what its Section IV-C asks for (row-length histogram, empty
//! rows, share of nonzeros in long rows, column locality), in one fixed order.

use crate::locality::{sample_stride, ColumnFacts, SAMPLE_BLOCK};
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

/// Rows plus column indices read from which [`Features::of_pattern`] (which
/// reads each row's first and last entry, and a sample of all) spreads its
/// blocks over a pool of two threads (about 0.2 ms of work).
const PARALLEL_PATTERN: usize = 1 << 18;

/// Rows per block of the feature pass: each block is folded into one
/// accumulator in place (folding row by row would move the accumulator,
/// histogram included, once per row). Also the block of the column-distance
/// sample.
const BLOCK: usize = SAMPLE_BLOCK;

/// Row-length facts of a pattern: the part of the feature vector that needs
/// every row pointer read (length statistics and the histogram). A
/// [`crate::Csr`] gathers them in the pass that validates it, over each block
/// of rows while its pointers are in the cache, and keeps them beside its
/// [`ColumnFacts`], so that [`Features::of`] reads no array at all.
///
/// Every field is an exact integer, merged by sum, minimum or maximum, so the
/// facts do not depend on how the rows were split among threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowFacts {
    /// Shortest row (`usize::MAX` without rows).
    pub min: usize,
    /// Longest row (0 without rows).
    pub max: usize,
    /// Sum of squared row lengths.
    pub sumsq: u128,
    /// Rows without entries.
    pub empty: usize,
    /// Entries of the rows longer than [`RowFacts::long_len`].
    pub long_nnz: usize,
    /// Rows per [`hist_bucket`].
    pub hist: [usize; HIST_BUCKETS],
}

impl Default for RowFacts {
    fn default() -> Self {
        RowFacts::ZERO
    }
}

impl RowFacts {
    /// The facts of no rows, the identity of [`RowFacts::merge`].
    pub const ZERO: RowFacts = RowFacts {
        min: usize::MAX,
        max: 0,
        sumsq: 0,
        empty: 0,
        long_nnz: 0,
        hist: [0; HIST_BUCKETS],
    };

    /// Rows longer than this count as long: 4x the mean row length, floored.
    pub fn long_len(nrows: usize, nnz: usize) -> usize {
        let mean = nnz as f64 / nrows.max(1) as f64;
        (4.0 * mean).floor() as usize
    }

    /// The facts of the rows whose pointers are `rp` (one more than the
    /// rows), rows longer than `long_len` counted as long: a few vectorised
    /// loops over the pointers, meant for a block that fits the L1 cache.
    #[inline(always)]
    pub(crate) fn of_rows(rp: &[u32], long_len: usize) -> RowFacts {
        let mut f = RowFacts::ZERO;
        length_stats(rp, long_len, &mut f);
        histogram(rp, (f.min, f.max), &mut f.hist);
        f
    }

    /// The facts of two disjoint sets of rows together.
    pub(crate) fn merge(mut self, b: RowFacts) -> RowFacts {
        self.min = self.min.min(b.min);
        self.max = self.max.max(b.max);
        self.sumsq += b.sumsq;
        self.empty += b.empty;
        self.long_nnz += b.long_nnz;
        for i in 0..HIST_BUCKETS {
            self.hist[i] += b.hist[i];
        }
        self
    }

    /// The facts of a valid row pointer computed row by row in the plainest
    /// way (the reference the constructor's fused pass is held to).
    pub fn of_pattern(row_ptr: &[u32]) -> RowFacts {
        let nrows = row_ptr.len().saturating_sub(1);
        let nnz = row_ptr.last().copied().unwrap_or(0) as usize;
        let long_len = RowFacts::long_len(nrows, nnz);
        let mut f = RowFacts::ZERO;
        for w in row_ptr.windows(2) {
            let len = (w[1] - w[0]) as usize;
            f.min = f.min.min(len);
            f.max = f.max.max(len);
            f.sumsq += (len as u128) * (len as u128);
            f.empty += usize::from(len == 0);
            f.long_nnz += if len > long_len { len } else { 0 };
            f.hist[hist_bucket(len)] += 1;
        }
        f
    }
}

/// What one block of rows contributes to the features: one pass over rows
/// gives length statistics, the histogram and column locality.
#[derive(Clone, Copy)]
struct Acc {
    rows: RowFacts,
    dist: f64,
    dist_nnz: usize,
    band: u64,
}

impl Acc {
    const ZERO: Acc = Acc {
        rows: RowFacts::ZERO,
        dist: 0.0,
        dist_nnz: 0,
        band: 0,
    };

    fn merge(mut self, b: Acc) -> Acc {
        self.rows = self.rows.merge(b.rows);
        self.dist += b.dist;
        self.dist_nnz += b.dist_nnz;
        self.band = self.band.max(b.band);
        self
    }

    /// The feature vector, in the order of [`FEATURE_NAMES`].
    fn values(&self, nrows: usize, ncols: usize, nnz: usize) -> Vec<f64> {
        let m = nrows.max(1) as f64;
        let mean = nnz as f64 / m;
        let r = &self.rows;
        let min = if nrows == 0 { 0 } else { r.min };
        // Population variance from exact integer sums: E[len^2] - mean^2.
        let var = if nrows == 0 {
            0.0
        } else {
            (r.sumsq as f64 / nrows as f64 - mean * mean).max(0.0)
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
            r.max as f64,
            ratio(var.sqrt(), mean),
            ratio(r.max as f64, mean),
            r.empty as f64,
            r.empty as f64 / m,
            ratio(r.long_nnz as f64, nnz as f64),
            ratio(self.dist, self.dist_nnz as f64) / n,
            self.band as f64 / n,
            nnz as f64 / (m * n),
        ];
        v.extend(r.hist.iter().map(|&h| h as f64 / m));
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
        RowPass {
            nrows,
            row_ptr,
            col_idx,
            long_len: RowFacts::long_len(nrows, nnz),
            stride: sample_stride(nrows, nnz),
        }
    }

    /// The accumulator of block `b`, compiled for AVX2 when the CPU has it
    /// (the same integer arithmetic, so the same values, in wider vectors).
    fn block(&self, b: usize) -> Acc {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { self.block_avx2(b) };
        }
        self.block_portable(b)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn block_avx2(&self, b: usize) -> Acc {
        self.block_portable(b)
    }

    /// The accumulator of block `b`: lengths first, then column locality.
    /// Row lengths are differences of neighbouring pointers, read again by
    /// each loop rather than kept in a buffer (the block's pointers stay in
    /// the L1 cache; zeroing a buffer per block cost a tenth of the pass).
    #[inline(always)]
    fn block_portable(&self, b: usize) -> Acc {
        let lo = b * BLOCK;
        let hi = ((b + 1) * BLOCK).min(self.nrows);
        let rp = &self.row_ptr[lo..=hi];
        let mut a = Acc::ZERO;
        a.rows = RowFacts::of_rows(rp, self.long_len);
        if b.is_multiple_of(self.stride) {
            // Every entry is read: the band is the largest distance.
            let (sum, far) = self.distance(lo, rp);
            a.band = far;
            a.dist = sum as f64;
            a.dist_nnz = (rp[rp.len() - 1] - rp[0]) as usize;
        } else {
            // Only the first and last entry of each row: cheaper than the
            // windows of `distance` when nothing else needs the entries.
            a.band = self.band(lo, rp);
        }
        a
    }

    /// `max |c - r|` over the entries of the rows from `lo` (`rp` their
    /// pointers): rows are sorted, so the farthest entry is the first or the last.
    #[inline(always)]
    fn band(&self, lo: usize, rp: &[u32]) -> u64 {
        let ci = self.col_idx;
        if ci.is_empty() {
            return 0;
        }
        let mut band = 0u64;
        for (i, (&s, &e)) in rp.iter().zip(&rp[1..]).enumerate() {
            let (s, e) = (s as usize, e as usize);
            // Branch-free: an empty row reads entry 0 and counts as 0.
            let nonempty = e > s;
            let (fi, li) = if nonempty { (s, e - 1) } else { (0, 0) };
            let r = (lo + i) as i64;
            let (first, last) = (ci[fi] as i64, ci[li] as i64);
            let far = (first - r).unsigned_abs().max((last - r).unsigned_abs());
            band = band.max(if nonempty { far } else { 0 });
        }
        band
    }

    /// The sum and the largest of `|c - r|` over the entries of the rows
    /// from `lo`: exact, in integers (each term is below 2^32), so the order
    /// of the sum is free. A row of at most [`SHORT_ROW`] entries is read
    /// through a fixed window with the entries past its end masked out, so
    /// that rows of varying length cost no mispredicted loop exits.
    #[inline(always)]
    fn distance(&self, lo: usize, rp: &[u32]) -> (u64, u64) {
        let ci = self.col_idx;
        let (mut sum, mut far) = (0u64, 0u32);
        for (i, (&s, &e)) in rp.iter().zip(&rp[1..]).enumerate() {
            let (s, e) = (s as usize, e as usize);
            let r = (lo + i) as u32;
            let window: Option<&[u32; SHORT_ROW]> =
                ci.get(s..s + SHORT_ROW).and_then(|w| w.try_into().ok());
            match window {
                Some(w) if e - s <= SHORT_ROW => {
                    let n = e - s;
                    let (mut d, mut m) = (0u64, 0u32);
                    for (j, &c) in w.iter().enumerate() {
                        let x = if j < n { c.abs_diff(r) } else { 0 };
                        d += u64::from(x);
                        m = m.max(x);
                    }
                    sum += d;
                    far = far.max(m);
                }
                _ => {
                    for &c in &ci[s..e] {
                        let x = c.abs_diff(r);
                        sum += u64::from(x);
                        far = far.max(x);
                    }
                }
            }
        }
        (sum, u64::from(far))
    }
}

/// Rows of at most this many entries take the fixed-window path of
/// [`RowPass::distance`].
const SHORT_ROW: usize = 8;

/// Rows per chunk of [`length_stats`]: a chunk whose rows hold fewer than
/// 2^16 nonzeros has a sum of squared lengths below 2^32 (it is at most the
/// square of the sum), so it is summed in 32-bit lanes, twice as many per
/// vector as 64-bit ones. 1024 rows keep rows of up to 63 entries on average
/// on that path.
const STATS_CHUNK: usize = 1024;

/// Shortest and longest row, the sum of squared lengths, empty rows and the
/// nonzeros of rows longer than `long_len`, into `a`, for the rows whose
/// pointers are `rp`: per chunk of [`STATS_CHUNK`] rows one loop of plain
/// reductions, which the compiler vectorises.
#[inline(always)]
fn length_stats(rp: &[u32], long_len: usize, a: &mut RowFacts) {
    // A length above u32::MAX cannot exist, so the clamp changes no comparison.
    let long_len = long_len.min(u32::MAX as usize) as u32;
    let nrows = rp.len().saturating_sub(1);
    let mut t = ChunkStats::ZERO;
    for c in 0..nrows.div_ceil(STATS_CHUNK) {
        let chunk = &rp[c * STATS_CHUNK..=((c + 1) * STATS_CHUNK).min(nrows)];
        let s = if chunk[chunk.len() - 1] - chunk[0] < 1 << 16 {
            ChunkStats::of::<u32>(chunk, long_len)
        } else {
            ChunkStats::of::<u64>(chunk, long_len)
        };
        t = t.merge(s);
    }
    if nrows > 0 {
        a.min = t.min as usize;
        a.max = t.max as usize;
    }
    a.sumsq = u128::from(t.sq);
    a.empty = t.empty as usize;
    a.long_nnz = t.long as usize;
}

/// The length statistics of a chunk of rows.
#[derive(Clone, Copy)]
struct ChunkStats {
    min: u32,
    max: u32,
    sq: u64,
    empty: u32,
    long: u64,
}

/// An unsigned lane wide enough for a chunk's sum of squared lengths.
trait SquareSum: Copy + Default + std::ops::Add<Output = Self> + Into<u64> {
    fn square(len: u32) -> Self;
}

impl SquareSum for u32 {
    #[inline(always)]
    fn square(len: u32) -> u32 {
        len * len
    }
}

impl SquareSum for u64 {
    #[inline(always)]
    fn square(len: u32) -> u64 {
        u64::from(len) * u64::from(len)
    }
}

impl ChunkStats {
    const ZERO: ChunkStats = ChunkStats {
        min: u32::MAX,
        max: 0,
        sq: 0,
        empty: 0,
        long: 0,
    };

    /// The statistics of the rows whose pointers are `rp`, squares summed in
    /// `S` (`u32` only when the chunk's nonzeros are below 2^16). The sum of
    /// long rows' lengths is at most the chunk's nonzeros, so it fits 32 bits.
    #[inline(always)]
    fn of<S: SquareSum>(rp: &[u32], long_len: u32) -> ChunkStats {
        let (mut min, mut max, mut sq, mut empty, mut long) =
            (u32::MAX, 0u32, S::default(), 0u32, 0u32);
        for (&s, &e) in rp.iter().zip(&rp[1..]) {
            let l = e - s;
            min = min.min(l);
            max = max.max(l);
            sq = sq + S::square(l);
            empty += u32::from(l == 0);
            long += if l > long_len { l } else { 0 };
        }
        ChunkStats {
            min,
            max,
            sq: sq.into(),
            empty,
            long: u64::from(long),
        }
    }

    fn merge(self, b: ChunkStats) -> ChunkStats {
        ChunkStats {
            min: self.min.min(b.min),
            max: self.max.max(b.max),
            sq: self.sq + b.sq,
            empty: self.empty + b.empty,
            long: self.long + b.long,
        }
    }
}

/// Bucket boundaries counted in one pass over a block's rows: each adds a
/// compare and an add per row to the loop, and eight keep every counter and
/// boundary in registers.
const THRESHOLDS_PER_PASS: usize = 8;

/// Adds the rows whose pointers are `rp` to the histogram, `min` and `max`
/// their shortest and longest row. Bucket `k >= 1` holds the rows of length
/// `>= 2^(k-1)` less those of the next bucket up, so only the boundaries
/// between the buckets of `min` and `max` are counted, up to
/// [`THRESHOLDS_PER_PASS`] of them in one vectorised pass (row by row, a
/// histogram's increments wait on each other, and cost more than the compares
/// even when every boundary is counted).
#[inline(always)]
fn histogram(rp: &[u32], (min, max): (usize, usize), hist: &mut [usize; HIST_BUCKETS]) {
    let n = rp.len().saturating_sub(1);
    if n == 0 {
        return;
    }
    let (b0, b1) = (hist_bucket(min), hist_bucket(max));
    // Boundary of bucket k: the shortest length in it, 2^(k-1).
    let mut bounds = [0u32; HIST_BUCKETS];
    for (t, k) in bounds.iter_mut().zip(b0 + 1..=b1) {
        *t = 1u32 << (k - 1);
    }
    let mut at_least = [0u32; HIST_BUCKETS];
    for (t, c) in bounds[..b1 - b0]
        .chunks(THRESHOLDS_PER_PASS)
        .zip(at_least.chunks_mut(THRESHOLDS_PER_PASS))
    {
        match t.len() {
            1 => count_at_least::<1>(rp, t, c),
            2 => count_at_least::<2>(rp, t, c),
            3 => count_at_least::<3>(rp, t, c),
            4 => count_at_least::<4>(rp, t, c),
            5 => count_at_least::<5>(rp, t, c),
            6 => count_at_least::<6>(rp, t, c),
            7 => count_at_least::<7>(rp, t, c),
            _ => count_at_least::<THRESHOLDS_PER_PASS>(rp, t, c),
        }
    }
    // Rows whose bucket is at least the current one.
    let mut above = n;
    for (k, &c) in (b0..b1).zip(&at_least) {
        hist[k] += above - c as usize;
        above = c as usize;
    }
    hist[b1] += above;
}

/// Into `counts`, the rows whose pointers are `rp` that are at least as long
/// as each of the `K` lengths `bounds`, in one pass.
#[inline(always)]
fn count_at_least<const K: usize>(rp: &[u32], bounds: &[u32], counts: &mut [u32]) {
    let t: [u32; K] = std::array::from_fn(|j| bounds[j]);
    let mut c = [0u32; K];
    for (&s, &e) in rp.iter().zip(&rp[1..]) {
        let l = e - s;
        for j in 0..K {
            c[j] += u32::from(l >= t[j]);
        }
    }
    counts[..K].copy_from_slice(&c);
}

impl Features {
    /// The features of a matrix, from the [`RowFacts`] and [`ColumnFacts`]
    /// its constructor gathered while validating it: no array is read, so
    /// the cost does not grow with the matrix (the same values as
    /// [`Features::of_pattern`], bit for bit).
    pub fn of<T: Scalar>(a: &Csr<T>) -> Self {
        Self::of_facts(
            (a.nrows(), a.ncols(), a.nnz()),
            a.row_facts(),
            a.column_facts(),
        )
    }

    /// The features of a pattern of `(rows, cols, nnz)` from its facts.
    pub fn of_facts(
        (nrows, ncols, nnz): (usize, usize, usize),
        rows: RowFacts,
        columns: ColumnFacts,
    ) -> Self {
        let acc = Acc {
            rows,
            // Exact integers below 2^53 (as the blocks' sums are), so the
            // same value as the blocks' partial sums added in any order.
            dist: columns.dist_sum as f64,
            dist_nnz: columns.dist_nnz as usize,
            band: columns.band,
        };
        let v = acc.values(nrows, ncols, nnz);
        debug_assert_eq!(v.len(), FEATURE_NAMES.len());
        Features { values: v }
    }

    /// Computes the features from the CSR pattern arrays in one pass over
    /// them (the same values as [`Features::of`], which reads no array).
    pub fn of_pattern(nrows: usize, ncols: usize, row_ptr: &[u32], col_idx: &[u32]) -> Self {
        let work = nrows + col_idx.len().min(1 << 19);
        let parallel = crate::threads::worth_threads(work, PARALLEL_PATTERN);
        Self::of_pattern_on(nrows, ncols, (row_ptr, col_idx), parallel)
    }

    /// [`Features::of_pattern`] on the thread pool or on this thread.
    fn of_pattern_on(
        nrows: usize,
        ncols: usize,
        (row_ptr, col_idx): (&[u32], &[u32]),
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
        let par = Features::of_pattern_on(n, n, (&rp, &ci), true);
        let seq = Features::of_pattern_on(n, n, (&rp, &ci), false);
        assert_eq!(par, seq);
        assert_eq!(par, Features::of_pattern(n, n, &rp, &ci));
    }

    /// The features computed row by row in the plainest way (the sampling
    /// rule of [`RowPass`] included), to hold the blocked, vectorised pass to.
    fn plain(nrows: usize, ncols: usize, rp: &[u32], ci: &[u32]) -> Vec<f64> {
        let pass = RowPass::new(nrows, rp, ci);
        let mut a = Acc::ZERO;
        let mut sq = 0u128;
        for r in 0..nrows {
            let (s, e) = (rp[r] as usize, rp[r + 1] as usize);
            let len = e - s;
            a.rows.min = a.rows.min.min(len);
            a.rows.max = a.rows.max.max(len);
            sq += (len * len) as u128;
            a.rows.empty += usize::from(len == 0);
            a.rows.long_nnz += if len > pass.long_len { len } else { 0 };
            a.rows.hist[hist_bucket(len)] += 1;
            for &c in &ci[s..e] {
                let d = (c as i64 - r as i64).unsigned_abs();
                a.band = a.band.max(d);
                if (r / BLOCK).is_multiple_of(pass.stride) {
                    a.dist += d as f64;
                    a.dist_nnz += 1;
                }
            }
        }
        a.rows.sumsq = sq;
        a.values(nrows, ncols, ci.len())
    }

    #[test]
    fn the_blocked_pass_equals_the_plain_one() {
        // Lengths that cross every path: empty rows, rows within and beyond the
        // short-row window, blocks of narrow and of wide length spans, a
        // matrix large enough to sample column locality, and short rows at
        // the very end of the entries.
        type Lengths = fn(usize) -> usize;
        let shapes: [(usize, Lengths); 5] = [
            (9000, |r| r % 6),
            (20_000, |r| if r % 97 == 0 { 300 + r % 5000 } else { r % 3 }),
            (3 * 4096 + 5, |r| (r * 2654435761) % 41),
            (300_000, |r| 3 + r % 4),
            (5000, |r| {
                if r < 4000 {
                    70_000 * usize::from(r == 7)
                } else {
                    1 + r % 9
                }
            }),
        ];
        for (n, len) in shapes {
            let (mut rp, mut ci) = (vec![0u32], Vec::new());
            for r in 0..n {
                let l = len(r).min(n);
                let start = (r * 7919) % (n - l + 1);
                ci.extend((start..start + l).map(|c| c as u32));
                rp.push(ci.len() as u32);
            }
            let want = plain(n, n, &rp, &ci);
            for parallel in [false, true] {
                let got = Features::of_pattern_on(n, n, (&rp, &ci), parallel);
                let (g, w): (Vec<u64>, Vec<u64>) = (
                    got.values.iter().map(|v| v.to_bits()).collect(),
                    want.iter().map(|v| v.to_bits()).collect(),
                );
                assert_eq!(g, w, "{n} rows, parallel {parallel}");
            }
            // The AVX2 build of a block and the portable one agree.
            let pass = RowPass::new(n, &rp, &ci);
            for b in 0..n.div_ceil(BLOCK) {
                let (x, y) = (pass.block(b), pass.block_portable(b));
                assert_eq!(x.values(n, n, ci.len()), y.values(n, n, ci.len()));
            }
        }
    }

    /// A pattern of rows of the given lengths, each a run of columns from 0.
    fn pattern_of(lens: &[usize]) -> (Vec<u32>, Vec<u32>) {
        let (mut rp, mut ci) = (vec![0u32], Vec::new());
        for &l in lens {
            ci.extend(0..l as u32);
            rp.push(ci.len() as u32);
        }
        (rp, ci)
    }

    #[test]
    fn every_histogram_span_and_both_square_sums_equal_the_plain_pass() {
        // Blocks whose shortest and longest rows lie 0 to 17 buckets apart
        // (1 to 3 passes of bucket boundaries), and chunks whose nonzeros sit
        // just below and at 2^16 (squares summed in 32 or 64 bits).
        let mut cases: Vec<Vec<usize>> = Vec::new();
        for b1 in 0..HIST_BUCKETS {
            let top = if b1 == 0 { 0 } else { 1usize << (b1 - 1) };
            for low in [0, 1, top] {
                let mut lens: Vec<usize> = (0..300)
                    .map(|r| [low, top, (low + top) / 2][r % 3])
                    .collect();
                lens.truncate(if top > 1000 { 3 } else { 300 });
                cases.push(lens);
            }
        }
        cases.push(vec![65_535, 0, 0]);
        cases.push(vec![65_536, 0, 0]);
        cases.push(vec![1; 65_535]);
        cases.push([vec![3; 1023], vec![62_000]].concat());
        for lens in cases {
            let (rp, ci) = pattern_of(&lens);
            let (n, m) = (lens.len(), lens.iter().max().copied().unwrap_or(0).max(1));
            let want = plain(n, m, &rp, &ci);
            let got = Features::of_pattern_on(n, m, (&rp, &ci), false);
            assert_eq!(
                got.values,
                want,
                "lengths {:?}...",
                &lens[..lens.len().min(4)]
            );
        }
    }

    #[test]
    fn threaded_equals_serial_on_awkward_patterns() {
        // The empty matrix, one row, one huge row among short ones, all rows
        // empty, and a last block of one row; read from the pattern on the
        // pool and on this thread, and from the facts the matrix keeps.
        let cases: Vec<Vec<usize>> = vec![
            vec![],
            vec![1],
            vec![0],
            [vec![2; 5000], vec![300_000], vec![1; 9000]].concat(),
            vec![0; 3 * BLOCK + 7],
            vec![3; 2 * BLOCK + 1],
        ];
        for lens in cases {
            let (rp, ci) = pattern_of(&lens);
            let (n, m) = (lens.len(), lens.iter().max().copied().unwrap_or(0).max(1));
            let want = plain(n, m, &rp, &ci);
            let a = Csr::try_new(n, m, rp.clone(), ci.clone(), vec![1.0f32; ci.len()]).unwrap();
            for parallel in [false, true] {
                let got = Features::of_pattern_on(n, m, (&rp, &ci), parallel);
                assert_eq!(got.values, want, "{n} rows, parallel {parallel}");
            }
            assert_eq!(a.row_facts(), RowFacts::of_pattern(&rp), "{n} rows");
            assert_eq!(Features::of(&a).values, want, "{n} rows");
        }
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
