//! Column facts: what the features need from every column index (the band and
//! the sampled column distances), gathered in the pass over the column indices
//! that validating a matrix makes anyway, and kept in the [`crate::Csr`].

use crate::features::RowFacts;
use crate::SparseError;
use rayon::prelude::*;
use std::ops::Range;

/// Rows per block of the column-distance sample (and of the feature pass).
pub(crate) const SAMPLE_BLOCK: usize = 4096;

/// Entries the column-distance sample reads at most, about.
const SAMPLE_NNZ: usize = 1 << 19;

/// Rows of at most this many entries are scanned through a fixed window with
/// the entries past the row's end masked out, so that rows of varying length
/// cost no mispredicted loop exits.
const WINDOW: usize = 8;

/// Every `stride`-th block of [`SAMPLE_BLOCK`] rows is in the column-distance
/// sample: all blocks up to [`SAMPLE_NNZ`] entries, beyond that evenly spaced
/// blocks holding about that many entries.
pub(crate) fn sample_stride(nrows: usize, nnz: usize) -> usize {
    nnz.div_ceil(SAMPLE_NNZ)
        .clamp(1, nrows.div_ceil(SAMPLE_BLOCK).max(1))
}

/// Facts about a matrix's column indices relative to their rows, the part of
/// the feature vector that needs every entry read. A [`crate::Csr`] computes
/// them once when it is built and hands out copies, so they always describe
/// its pattern.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ColumnFacts {
    /// `max |c - r|` over all entries (0 without entries).
    pub band: u64,
    /// `sum |c - r|` over the entries of the sampled rows (every
    /// [`sample_stride`]-th block of [`SAMPLE_BLOCK`] rows), exact.
    pub dist_sum: u64,
    /// Entries of the sampled rows.
    pub dist_nnz: u64,
}

/// What one pass learns of one row's entries.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RowScan {
    /// Largest column index (0 for an empty row).
    pub max_col: u32,
    /// Neighbouring entries not strictly increasing (0 when the row is sorted).
    pub descents: u32,
    /// Largest `|c - r|`.
    pub far: u32,
    /// Sum of `|c - r|`.
    pub sum: u64,
}

/// Scans the entries `s..e` of `ci`, which belong to row `r`: one loop of
/// plain reductions, which the compiler vectorises.
#[inline(always)]
pub(crate) fn scan_row(ci: &[u32], s: usize, e: usize, r: u32) -> RowScan {
    let n = e - s;
    let window: Option<&[u32; WINDOW]> = ci.get(s..s + WINDOW).and_then(|w| w.try_into().ok());
    if let (Some(w), true) = (window, n <= WINDOW) {
        let mut out = RowScan::default();
        for j in 0..WINDOW {
            let live = j < n;
            let c = if live { w[j] } else { 0 };
            let x = if live { c.abs_diff(r) } else { 0 };
            out.max_col = out.max_col.max(c);
            out.far = out.far.max(x);
            out.sum += u64::from(x);
            if j > 0 {
                out.descents += u32::from(live && w[j - 1] >= c);
            }
        }
        return out;
    }
    let row = &ci[s..e];
    let mut out = RowScan::default();
    for &c in row {
        let x = c.abs_diff(r);
        out.max_col = out.max_col.max(c);
        out.far = out.far.max(x);
        out.sum += u64::from(x);
    }
    out.descents = row
        .iter()
        .zip(row.iter().skip(1))
        .map(|(a, b)| u32::from(a >= b))
        .sum();
    out
}

impl ColumnFacts {
    /// The facts of a valid pattern, computed entry by entry in the plainest
    /// way (the reference the fused pass of [`crate::Csr::try_new`] is held to).
    pub fn of_pattern(nrows: usize, row_ptr: &[u32], col_idx: &[u32]) -> ColumnFacts {
        let stride = sample_stride(nrows, col_idx.len());
        let mut f = ColumnFacts::default();
        for r in 0..nrows {
            for &c in &col_idx[row_ptr[r] as usize..row_ptr[r + 1] as usize] {
                let d = (i64::from(c) - r as i64).unsigned_abs();
                f.band = f.band.max(d);
                if (r / SAMPLE_BLOCK).is_multiple_of(stride) {
                    f.dist_sum += d;
                    f.dist_nnz += 1;
                }
            }
        }
        f
    }
}

/// Rows plus entries from which [`scan_columns`] spreads its blocks over a
/// pool of two threads (about 0.1 ms of work; more threads start sooner, see
/// `crate::threads`).
const PARALLEL_FROM: usize = 1 << 18;

/// Checks every column index of a pattern whose `row_ptr` is valid, and in
/// the same pass gathers its [`ColumnFacts`] and [`RowFacts`]: whether every
/// row is strictly increasing, and the facts (which describe the matrix only
/// when it is). The row facts are taken block by block while the block's
/// pointers are in the cache, so the features need no pass of their own.
/// Blocks of [`SAMPLE_BLOCK`] rows are scanned independently (on the thread
/// pool for a large matrix) and merged in order, so that the error names the
/// first bad entry; every merge is an integer maximum, or or sum, so the
/// facts do not depend on the threads.
pub(crate) fn scan_columns(
    nrows: usize,
    ncols: usize,
    row_ptr: &[u32],
    col_idx: &[u32],
) -> Result<(bool, ColumnFacts, RowFacts), SparseError> {
    let stride = sample_stride(nrows, col_idx.len());
    let long_len = RowFacts::long_len(nrows, col_idx.len());
    let nblocks = nrows.div_ceil(SAMPLE_BLOCK);
    let scan = |b: usize| scan_any_block(b, (nrows, stride, long_len), row_ptr, col_idx);
    let blocks: Vec<(RowScan, RowFacts)> =
        if crate::threads::worth_threads(nrows + col_idx.len(), PARALLEL_FROM) {
            (0..nblocks).into_par_iter().map(scan).collect()
        } else {
            (0..nblocks).map(scan).collect()
        };
    let mut facts = ColumnFacts::default();
    let mut rows = RowFacts::ZERO;
    let mut descents = 0u32;
    for (b, (block, lengths)) in blocks.iter().enumerate() {
        let (lo, hi) = (b * SAMPLE_BLOCK, ((b + 1) * SAMPLE_BLOCK).min(nrows));
        let nnz = row_ptr[hi] - row_ptr[lo];
        if nnz > 0 && block.max_col as usize >= ncols {
            return Err(first_out_of_range(lo..hi, ncols, row_ptr, col_idx));
        }
        descents |= block.descents;
        rows = rows.merge(*lengths);
        facts.band = facts.band.max(u64::from(block.far));
        if b.is_multiple_of(stride) {
            facts.dist_sum += block.sum;
            facts.dist_nnz += u64::from(nnz);
        }
    }
    Ok((descents == 0, facts, rows))
}

/// Block `b` of rows scanned: every entry's distance when it is in the
/// sample, else only each row's ends; then the block's row facts, rows longer
/// than `long_len` counted as long. Compiled for AVX2 when the CPU has it
/// (the same integer arithmetic, so the same result).
fn scan_any_block(
    b: usize,
    (nrows, stride, long_len): (usize, usize, usize),
    rp: &[u32],
    ci: &[u32],
) -> (RowScan, RowFacts) {
    let rows = b * SAMPLE_BLOCK..((b + 1) * SAMPLE_BLOCK).min(nrows);
    let sampled = b.is_multiple_of(stride);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { scan_any_block_avx2(rows, (sampled, long_len), rp, ci) };
    }
    scan_any_block_portable(rows, (sampled, long_len), rp, ci)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn scan_any_block_avx2(
    rows: Range<usize>,
    flags: (bool, usize),
    rp: &[u32],
    ci: &[u32],
) -> (RowScan, RowFacts) {
    scan_any_block_portable(rows, flags, rp, ci)
}

#[inline(always)]
fn scan_any_block_portable(
    rows: Range<usize>,
    (sampled, long_len): (bool, usize),
    rp: &[u32],
    ci: &[u32],
) -> (RowScan, RowFacts) {
    let lengths = RowFacts::of_rows(&rp[rows.start..=rows.end], long_len);
    let scan = if sampled {
        scan_block(rows, rp, ci)
    } else {
        scan_block_ends(rows, rp, ci)
    };
    (scan, lengths)
}

/// The rows `rows` scanned together, row by row: the largest column,
/// descents, the largest distance and the distances' sum (a block of the sample).
#[inline(always)]
fn scan_block(rows: Range<usize>, row_ptr: &[u32], col_idx: &[u32]) -> RowScan {
    let mut out = RowScan::default();
    for r in rows {
        let (s, e) = (row_ptr[r] as usize, row_ptr[r + 1] as usize);
        let row = scan_row(col_idx, s, e, r as u32);
        out.max_col = out.max_col.max(row.max_col);
        out.descents |= row.descents;
        out.far = out.far.max(row.far);
        out.sum += row.sum;
    }
    out
}

/// What [`scan_block`] finds, less the distances' sum, with fewer reads per
/// row: the largest column and the descents over the block's entries as one
/// run (less the descents where one row ends and the next begins), and the
/// largest distance from each row's first and last entry (the farthest when
/// the rows are sorted; when they are not, the matrix is scanned again
/// after sorting).
#[inline(always)]
fn scan_block_ends(rows: Range<usize>, row_ptr: &[u32], col_idx: &[u32]) -> RowScan {
    let (s0, e0) = (row_ptr[rows.start] as usize, row_ptr[rows.end] as usize);
    let run = &col_idx[s0..e0];
    let mut out = RowScan::default();
    if run.is_empty() {
        return out;
    }
    out.max_col = run.iter().fold(0, |m, &c| m.max(c));
    let run_descents: u32 = run
        .iter()
        .zip(&run[1..])
        .map(|(a, b)| u32::from(a >= b))
        .sum();
    // Descents between the last entry of one nonempty row and the first of
    // the next nonempty one.
    let (mut between, mut seen, mut prev_last) = (0u32, false, 0u32);
    for r in rows {
        let (s, e) = (row_ptr[r] as usize, row_ptr[r + 1] as usize);
        // Branch-free: an empty row reads the run's first entry and counts nothing.
        let nonempty = e > s;
        let (first, last) = if nonempty { (s, e - 1) } else { (s0, s0) };
        let (first, last) = (col_idx[first], col_idx[last]);
        let far = first.abs_diff(r as u32).max(last.abs_diff(r as u32));
        out.far = out.far.max(if nonempty { far } else { 0 });
        between += u32::from(nonempty && seen && prev_last >= first);
        prev_last = if nonempty { last } else { prev_last };
        seen |= nonempty;
    }
    out.descents = run_descents - between;
    out
}

/// The first entry of `rows` whose column is not below `ncols`, as an error.
#[cold]
fn first_out_of_range(
    rows: Range<usize>,
    ncols: usize,
    row_ptr: &[u32],
    col_idx: &[u32],
) -> SparseError {
    for r in rows {
        let row = &col_idx[row_ptr[r] as usize..row_ptr[r + 1] as usize];
        if let Some(&c) = row.iter().find(|&&c| c as usize >= ncols) {
            return SparseError::ColumnOutOfRange {
                row: r,
                col: u64::from(c),
                ncols,
            };
        }
    }
    unreachable!("a block whose largest column is out of range has such an entry")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_scan_equals_the_plain_one_through_both_paths() {
        // Entries past a short row's end (inside the window) must not count.
        let ci: Vec<u32> = vec![3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4];
        for s in 0..ci.len() {
            for e in s..=ci.len() {
                for r in [0u32, 4, 9, 1 << 31] {
                    let got = scan_row(&ci, s, e, r);
                    let row = &ci[s..e];
                    let far = row.iter().map(|&c| c.abs_diff(r)).max().unwrap_or(0);
                    let sum: u64 = row.iter().map(|&c| u64::from(c.abs_diff(r))).sum();
                    let desc = row.windows(2).filter(|w| w[0] >= w[1]).count() as u32;
                    assert_eq!(got.max_col, row.iter().copied().max().unwrap_or(0));
                    assert_eq!((got.far, got.sum, got.descents), (far, sum, desc));
                }
            }
        }
    }

    #[test]
    fn the_sample_covers_everything_up_to_its_size() {
        assert_eq!(sample_stride(0, 0), 1);
        assert_eq!(sample_stride(10, SAMPLE_NNZ), 1);
        assert_eq!(sample_stride(1 << 20, SAMPLE_NNZ + 1), 2);
        // Never more than one block in the sample's stride for few rows.
        assert_eq!(sample_stride(1, usize::MAX / 2), 1);
    }
}
