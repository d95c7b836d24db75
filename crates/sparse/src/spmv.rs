//! The reference SpMV (the ground truth every kernel is checked against), the
//! multithreaded CPU SpMV baseline, and the tolerance model used to compare them.

use crate::{Csr, Scalar, SparseError};
use rayon::prelude::*;

fn check_x<T: Scalar>(a: &Csr<T>, x: &[T]) -> Result<(), SparseError> {
    if x.len() != a.ncols() {
        return Err(SparseError::InvalidParameter(format!(
            "x has {} entries but the matrix has {} columns",
            x.len(),
            a.ncols()
        )));
    }
    Ok(())
}

/// y = A x with a plain sequential loop, accumulating in `T` in storage order.
pub fn spmv_ref<T: Scalar>(a: &Csr<T>, x: &[T]) -> Result<Vec<T>, SparseError> {
    check_x(a, x)?;
    let (rp, ci, v) = (a.row_ptr(), a.col_idx(), a.values());
    let mut y = vec![T::zero(); a.nrows()];
    for (r, yr) in y.iter_mut().enumerate() {
        let mut s = T::zero();
        for k in rp[r] as usize..rp[r + 1] as usize {
            s += v[k] * x[ci[k] as usize];
        }
        *yr = s;
    }
    Ok(y)
}

/// y = A x on all CPU cores (rayon), rows split into chunks of similar nonzero count.
pub fn spmv_par<T: Scalar>(a: &Csr<T>, x: &[T]) -> Result<Vec<T>, SparseError> {
    check_x(a, x)?;
    let mut y = vec![T::zero(); a.nrows()];
    spmv_par_into(a, x, &mut y);
    Ok(y)
}

/// Like [`spmv_par`] into a caller-owned `y` (lengths must already match).
pub fn spmv_par_into<T: Scalar>(a: &Csr<T>, x: &[T], y: &mut [T]) {
    let (rp, ci, v) = (a.row_ptr(), a.col_idx(), a.values());
    // Chunks of rows small enough to balance, large enough to amortise scheduling.
    let chunk = (a.nrows() / (rayon::current_num_threads() * 16)).clamp(256, 1 << 16);
    y.par_chunks_mut(chunk).enumerate().for_each(|(ch, ys)| {
        let base = ch * chunk;
        for (i, yr) in ys.iter_mut().enumerate() {
            let r = base + i;
            let mut s = T::zero();
            for k in rp[r] as usize..rp[r + 1] as usize {
                s += v[k] * x[ci[k] as usize];
            }
            *yr = s;
        }
    });
}

/// Per-row `sum |a_rc * x_c|`, the scale of rounding error in row `r` of y.
pub fn abs_row_sums<T: Scalar>(a: &Csr<T>, x: &[T]) -> Vec<f64> {
    (0..a.nrows())
        .map(|r| {
            let (c, v) = a.row(r);
            c.iter()
                .zip(v)
                .map(|(&c, &v)| (v.to_f64() * x[c as usize].to_f64()).abs())
                .sum()
        })
        .collect()
}

/// How a computed y compares with the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Largest `|y - y_ref| / max(|y_ref|, tiny)` over rows, for reports.
    pub max_rel_err: f64,
    /// Largest ratio of the error to its allowed bound; at most 1 means "equal".
    pub worst_bound_ratio: f64,
    /// The row where that ratio is reached.
    pub worst_row: usize,
}

impl Comparison {
    /// Whether every row is within its tolerance.
    pub fn ok(&self) -> bool {
        self.worst_bound_ratio <= 1.0
    }
}

/// Compares `y` with the reference `y_ref` of the same `a` and `x`.
///
/// Row `r` may differ by `safety * eps * (len_r + 1) * sum_k |a_rk x_k|`, the classic
/// bound for a sum of `len_r` products in any order, with `eps` the machine epsilon
/// of `T` (so the tolerance scales with row length and precision). NaN never passes.
pub fn compare<T: Scalar>(a: &Csr<T>, x: &[T], y: &[T], y_ref: &[T]) -> Comparison {
    assert_eq!(y.len(), y_ref.len(), "compare: y and y_ref lengths differ");
    let scale = abs_row_sums(a, x);
    let safety = 4.0;
    let mut out = Comparison {
        max_rel_err: 0.0,
        worst_bound_ratio: 0.0,
        worst_row: 0,
    };
    for r in 0..y.len() {
        let (yv, rv) = (y[r].to_f64(), y_ref[r].to_f64());
        let err = (yv - rv).abs();
        let err = if err.is_nan() { f64::INFINITY } else { err };
        let rel = err / rv.abs().max(f64::MIN_POSITIVE);
        if rel > out.max_rel_err && (rv != 0.0 || err > 0.0) {
            out.max_rel_err = if rv == 0.0 { err } else { rel };
        }
        let bound = safety * T::EPSILON * (a.row_len(r) as f64 + 1.0) * scale[r];
        let ratio = if err == 0.0 {
            0.0
        } else if bound == 0.0 {
            f64::INFINITY
        } else {
            err / bound
        };
        if ratio > out.worst_bound_ratio {
            out.worst_bound_ratio = ratio;
            out.worst_row = r;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Csr<f64> {
        // [1 0 2]
        // [0 0 0]
        // [3 4 5]
        Csr::try_new(
            3,
            3,
            vec![0, 2, 2, 5],
            vec![0, 2, 0, 1, 2],
            vec![1., 2., 3., 4., 5.],
        )
        .unwrap()
    }

    #[test]
    fn reference_on_hand_computed_matrices() {
        let a = small();
        assert_eq!(
            spmv_ref(&a, &[1.0, 2.0, 3.0]).unwrap(),
            vec![7.0, 0.0, 26.0]
        );
        let i = Csr::<f32>::identity(3).unwrap();
        assert_eq!(spmv_ref(&i, &[4.0, 5.0, 6.0]).unwrap(), vec![4.0, 5.0, 6.0]);
        let wide = Csr::<f64>::try_new(1, 4, vec![0, 4], vec![0, 1, 2, 3], vec![1., -1., 2., -2.])
            .unwrap();
        assert_eq!(spmv_ref(&wide, &[1., 1., 1., 1.]).unwrap(), vec![0.0]);
        let empty = Csr::<f64>::zeros(0, 0).unwrap();
        assert!(spmv_ref(&empty, &[]).unwrap().is_empty());
        assert!(spmv_ref(&a, &[1.0]).is_err());
    }

    #[test]
    fn parallel_equals_reference() {
        let a = small();
        let x = [0.5, -1.0, 2.0];
        assert_eq!(spmv_par(&a, &x).unwrap(), spmv_ref(&a, &x).unwrap());
    }

    #[test]
    fn compare_detects_errors_and_nan() {
        let a = small();
        let x = [1.0, 2.0, 3.0];
        let y = spmv_ref(&a, &x).unwrap();
        assert!(compare(&a, &x, &y, &y).ok());
        let mut bad = y.clone();
        bad[2] += 1e-3;
        assert!(!compare(&a, &x, &bad, &y).ok());
        bad[2] = f64::NAN;
        assert!(!compare(&a, &x, &bad, &y).ok());
        let mut nonzero_empty = y.clone();
        nonzero_empty[1] = 1e-300;
        assert!(!compare(&a, &x, &nonzero_empty, &y).ok());
    }
}
