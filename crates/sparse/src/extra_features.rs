//! Row-shape and locality features beyond [`crate::FEATURE_NAMES`], computed
//! on request only (a model that does not read them pays nothing), for
//! judging whether they separate the cases the trees get wrong (issue 12 item 4).
//!
//! | name | meaning |
//! |---|---|
//! | `rows_lt_2` ... `rows_lt_32` | fraction of rows shorter than 2, 4, 8, 16, 32 (the subvector widths) |
//! | `row_len_jump` | mean `|len(r+1) - len(r)|` over neighbouring rows, over the mean row length (0 when it is 0) |
//! | `vrow32_within_var` | share of the row-length sum of squares inside groups of 32 neighbouring rows (0 when all rows are alike) |
//! | `x_lines_per_nnz` | runs of entries of a row in one group of 16 columns (a 64-byte line of f32 `x`), per nonzero |
//! | `len_bins` | distinct values of `min(row length, 99)` |
//! | `bins_u10`, `bins_u100`, `bins_u1000` | non-empty bins of the binning at U = 10, 100, 1000 |

use crate::{Binning, Scheme};

/// Every extra feature, in the order [`extra_features`] writes them when asked for all.
pub const EXTRA_FEATURE_NAMES: [&str; 12] = [
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

/// Rows per group of `vrow32_within_var`.
const GROUP: usize = 32;

/// `a / b`, 0 when `b` is 0.
fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

/// The values of the extra features `names` (each one of [`EXTRA_FEATURE_NAMES`],
/// `None` for an unknown name) of the pattern `row_ptr`, `col_idx`; only the
/// passes the names need are run.
pub fn extra_features(row_ptr: &[u32], col_idx: &[u32], names: &[&str]) -> Option<Vec<f64>> {
    if names.iter().any(|n| !EXTRA_FEATURE_NAMES.contains(n)) {
        return None;
    }
    let rows = row_ptr.len().saturating_sub(1);
    let len = |r: usize| (row_ptr[r + 1] - row_ptr[r]) as usize;
    let n = rows as f64;
    let nnz = row_ptr.last().copied().unwrap_or(0) as f64;
    let mean = ratio(nnz, n);
    let out = names
        .iter()
        .map(|&name| match name {
            "rows_lt_2" | "rows_lt_4" | "rows_lt_8" | "rows_lt_16" | "rows_lt_32" => {
                let w: usize = name["rows_lt_".len()..].parse().expect("a width");
                ratio((0..rows).filter(|&r| len(r) < w).count() as f64, n)
            }
            "row_len_jump" => {
                let jumps: usize = (1..rows).map(|r| len(r).abs_diff(len(r - 1))).sum();
                ratio(ratio(jumps as f64, (rows.max(1) - 1) as f64), mean)
            }
            "vrow32_within_var" => within_group_share(rows, &len, mean),
            "x_lines_per_nnz" => ratio(x_lines(row_ptr, col_idx) as f64, nnz),
            "len_bins" => {
                let mut seen = [false; 100];
                (0..rows).for_each(|r| seen[len(r).min(99)] = true);
                seen.iter().filter(|&&s| s).count() as f64
            }
            _ => {
                let u: u32 = name["bins_u".len()..].parse().expect("a granularity");
                Binning::new(row_ptr, Scheme::Granularity(u))
                    .nonempty_bins()
                    .count() as f64
            }
        })
        .collect();
    Some(out)
}

/// Share of the row lengths' sum of squares (about the mean) that lies inside
/// groups of [`GROUP`] neighbouring rows rather than between the groups' means.
fn within_group_share(rows: usize, len: &dyn Fn(usize) -> usize, mean: f64) -> f64 {
    let (mut total, mut within) = (0.0, 0.0);
    for start in (0..rows).step_by(GROUP) {
        let end = (start + GROUP).min(rows);
        let g: Vec<f64> = (start..end).map(|r| len(r) as f64).collect();
        let gm = g.iter().sum::<f64>() / g.len() as f64;
        within += g.iter().map(|v| (v - gm) * (v - gm)).sum::<f64>();
        total += g.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>();
    }
    ratio(within, total).clamp(0.0, 1.0)
}

/// Runs of a row's entries in one group of 16 columns, summed over rows.
fn x_lines(row_ptr: &[u32], col_idx: &[u32]) -> usize {
    row_ptr
        .windows(2)
        .map(|w| {
            let cols = &col_idx[w[0] as usize..w[1] as usize];
            let mut runs = 0;
            let mut last = u32::MAX;
            for &c in cols {
                if c >> 4 != last {
                    runs += 1;
                    last = c >> 4;
                }
            }
            runs
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_on_a_small_pattern() {
        // Rows of lengths 0, 2, 4: columns 0,1 | 0,1,17,40.
        let row_ptr = [0, 0, 2, 6];
        let col_idx = [0, 1, 0, 1, 17, 40];
        let v = extra_features(&row_ptr, &col_idx, &EXTRA_FEATURE_NAMES).unwrap();
        let get = |n: &str| v[EXTRA_FEATURE_NAMES.iter().position(|m| *m == n).unwrap()];
        assert!((get("rows_lt_2") - 1.0 / 3.0).abs() < 1e-12);
        assert!((get("rows_lt_4") - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(get("rows_lt_8"), 1.0);
        // Jumps 2 and 2 over 2 pairs, over the mean length 2.
        assert_eq!(get("row_len_jump"), 1.0);
        // One group: everything is within it.
        assert_eq!(get("vrow32_within_var"), 1.0);
        // Row 1: one line; row 2: lines 0, 1, 2: 4 lines for 6 entries.
        assert!((get("x_lines_per_nnz") - 4.0 / 6.0).abs() < 1e-12);
        assert_eq!(get("len_bins"), 3.0);
        assert_eq!(get("bins_u10"), 1.0);
        // Only what is asked for, in the order asked.
        assert_eq!(
            extra_features(&row_ptr, &col_idx, &["len_bins", "rows_lt_2"]).unwrap(),
            vec![3.0, get("rows_lt_2")]
        );
        assert!(extra_features(&row_ptr, &col_idx, &["nope"]).is_none());
    }

    #[test]
    fn uniform_rows_and_the_empty_matrix() {
        // 64 rows of 2 entries, then 64 of 4: all variance is between groups.
        let mut row_ptr = vec![0u32];
        for r in 0..128u32 {
            let l = if r < 64 { 2 } else { 4 };
            row_ptr.push(row_ptr.last().unwrap() + l);
        }
        let col_idx: Vec<u32> = (0..*row_ptr.last().unwrap()).map(|i| i % 4).collect();
        let v = extra_features(&row_ptr, &col_idx, &EXTRA_FEATURE_NAMES).unwrap();
        assert_eq!(v[6], 0.0, "vrow32_within_var");
        assert!((v[5] - (2.0 / 127.0) / 3.0).abs() < 1e-12, "row_len_jump");
        assert_eq!(v[7], 128.0 / 384.0, "x_lines_per_nnz: one line per row");
        let e = extra_features(&[0], &[], &EXTRA_FEATURE_NAMES).unwrap();
        assert!(e.iter().all(|x| x.is_finite()), "{e:?}");
    }
}
