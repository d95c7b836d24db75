//! The compressed sparse row matrix type, validated once at construction.

use crate::features::RowFacts;
use crate::locality::{scan_columns, ColumnFacts};
use crate::{RowPtr, Scalar, SparseError};

/// Largest row count, column count and nonzero count a matrix may have, so that
/// every index fits the signed 32-bit `int` the OpenCL kernels use.
pub const MAX_DIM: usize = i32::MAX as usize;

/// A CSR matrix with 32-bit column indices.
///
/// Invariants, established by [`Csr::try_new`] and [`Csr::from_triplets`] and
/// trusted everywhere else:
/// - `row_ptr.len() == nrows + 1`, `row_ptr[0] == 0`, `row_ptr` never decreases and
///   ends at `nnz == col_idx.len() == values.len()`;
/// - every column index is below `ncols`;
/// - within a row, column indices are strictly increasing: rows are sorted by
///   column and **duplicate entries are summed** into one;
/// - `nrows`, `ncols` and `nnz` are at most [`MAX_DIM`].
///
/// Explicit zeros are kept (they are stored entries, as in the Matrix Market file).
///
/// The matrix also keeps its [`ColumnFacts`] (band and sampled column
/// distances) and [`RowFacts`] (row-length statistics and histogram),
/// gathered in the pass that validates the column indices, so that its
/// features cost no pass of their own; the arrays cannot be changed in
/// place, so the facts always describe the pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Csr<T> {
    nrows: usize,
    ncols: usize,
    row_ptr: Vec<u32>,
    col_idx: Vec<u32>,
    values: Vec<T>,
    columns: ColumnFacts,
    lengths: RowFacts,
}

fn check_dim(what: &'static str, value: usize) -> Result<(), SparseError> {
    if value > MAX_DIM {
        return Err(SparseError::TooLarge {
            what,
            value: value as u64,
            max: MAX_DIM as u64,
        });
    }
    Ok(())
}

impl<T: Scalar> Csr<T> {
    /// Builds a matrix from CSR arrays, checking every invariant.
    ///
    /// Rows whose column indices are not increasing are sorted, and duplicate
    /// entries within a row are summed; structural errors (lengths, `row_ptr`
    /// shape, indices out of range, sizes over [`MAX_DIM`]) are returned.
    pub fn try_new(
        nrows: usize,
        ncols: usize,
        row_ptr: Vec<u32>,
        col_idx: Vec<u32>,
        values: Vec<T>,
    ) -> Result<Self, SparseError> {
        check_dim("rows", nrows)?;
        check_dim("cols", ncols)?;
        check_dim("nnz", col_idx.len())?;
        if row_ptr.len() != nrows + 1 {
            return Err(SparseError::RowPtrLength {
                expected: nrows + 1,
                found: row_ptr.len(),
            });
        }
        if col_idx.len() != values.len() {
            return Err(SparseError::LengthMismatch {
                cols: col_idx.len(),
                values: values.len(),
            });
        }
        if row_ptr[0] != 0 {
            return Err(SparseError::RowPtrStart(row_ptr[0]));
        }
        for r in 0..nrows {
            if row_ptr[r + 1] < row_ptr[r] {
                return Err(SparseError::RowPtrDecreasing {
                    row: r,
                    start: row_ptr[r],
                    end: row_ptr[r + 1],
                });
            }
        }
        if row_ptr[nrows] as usize != col_idx.len() {
            return Err(SparseError::RowPtrEnd {
                found: row_ptr[nrows],
                nnz: col_idx.len(),
            });
        }
        let (sorted, columns, lengths) = scan_columns(nrows, ncols, &row_ptr, &col_idx)?;
        let mut m = Csr {
            nrows,
            ncols,
            row_ptr,
            col_idx,
            values,
            columns,
            lengths,
        };
        if !sorted {
            m.canonicalize()?;
        }
        Ok(m)
    }

    /// Builds a matrix from coordinate triplets (any order); duplicates are summed.
    ///
    /// `rows`, `cols` and `vals` must have equal lengths; indices are 0-based.
    pub fn from_triplets(
        nrows: usize,
        ncols: usize,
        rows: &[u32],
        cols: &[u32],
        vals: &[T],
    ) -> Result<Self, SparseError> {
        check_dim("rows", nrows)?;
        check_dim("cols", ncols)?;
        check_dim("nnz", rows.len())?;
        if rows.len() != cols.len() || rows.len() != vals.len() {
            return Err(SparseError::LengthMismatch {
                cols: cols.len(),
                values: vals.len().min(rows.len()),
            });
        }
        let mut counts = vec![0u32; nrows + 1];
        for (&r, &c) in rows.iter().zip(cols) {
            if r as usize >= nrows {
                return Err(SparseError::RowOutOfRange {
                    row: r as u64,
                    nrows,
                });
            }
            if c as usize >= ncols {
                return Err(SparseError::ColumnOutOfRange {
                    row: r as usize,
                    col: c as u64,
                    ncols,
                });
            }
            counts[r as usize + 1] += 1;
        }
        for r in 0..nrows {
            counts[r + 1] += counts[r];
        }
        let row_ptr = counts.clone();
        let mut next = counts;
        let nnz = rows.len();
        let mut col_idx = vec![0u32; nnz];
        let mut values = vec![T::zero(); nnz];
        for i in 0..nnz {
            let r = rows[i] as usize;
            let dst = next[r] as usize;
            col_idx[dst] = cols[i];
            values[dst] = vals[i];
            next[r] += 1;
        }
        let mut m = Csr {
            nrows,
            ncols,
            row_ptr,
            col_idx,
            values,
            columns: ColumnFacts::default(),
            lengths: RowFacts::ZERO,
        };
        m.canonicalize()?;
        Ok(m)
    }

    /// Sorts each row by column and sums duplicates, compacting the arrays,
    /// and gathers the column facts of the result (every index was checked
    /// before, so the scan finds no error).
    fn canonicalize(&mut self) -> Result<(), SparseError> {
        let mut out = 0usize;
        let mut start = 0usize;
        let mut scratch: Vec<(u32, T)> = Vec::new();
        for r in 0..self.nrows {
            let end = self.row_ptr[r + 1] as usize;
            let row_start_out = out;
            let already = (start + 1..end).all(|k| self.col_idx[k - 1] < self.col_idx[k]);
            if already {
                for k in start..end {
                    self.col_idx[out] = self.col_idx[k];
                    self.values[out] = self.values[k];
                    out += 1;
                }
            } else {
                scratch.clear();
                scratch.extend((start..end).map(|k| (self.col_idx[k], self.values[k])));
                scratch.sort_by_key(|e| e.0);
                for &(c, v) in &scratch {
                    if out > row_start_out && self.col_idx[out - 1] == c {
                        self.values[out - 1] += v;
                    } else {
                        self.col_idx[out] = c;
                        self.values[out] = v;
                        out += 1;
                    }
                }
            }
            start = end;
            self.row_ptr[r + 1] = out as u32;
        }
        self.col_idx.truncate(out);
        self.values.truncate(out);
        // Summed duplicates change the distances and the sample: scan again.
        (_, self.columns, self.lengths) =
            scan_columns(self.nrows, self.ncols, &self.row_ptr, &self.col_idx)?;
        Ok(())
    }

    /// An `nrows x ncols` matrix with no stored entries.
    pub fn zeros(nrows: usize, ncols: usize) -> Result<Self, SparseError> {
        Self::try_new(nrows, ncols, vec![0; nrows + 1], Vec::new(), Vec::new())
    }

    /// The `n x n` identity.
    pub fn identity(n: usize) -> Result<Self, SparseError> {
        Self::try_new(
            n,
            n,
            (0..=n as u32).collect(),
            (0..n as u32).collect(),
            vec![T::from_f64(1.0); n],
        )
    }

    /// Number of rows.
    pub fn nrows(&self) -> usize {
        self.nrows
    }
    /// Number of columns.
    pub fn ncols(&self) -> usize {
        self.ncols
    }
    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.col_idx.len()
    }
    /// Row pointer array (`nrows + 1` entries).
    pub fn row_ptr(&self) -> &[u32] {
        &self.row_ptr
    }
    /// The row pointer as a [`RowPtr`] known to never decrease (the
    /// constructors' invariant), for planning without checking it again.
    pub fn rows(&self) -> RowPtr<'_> {
        RowPtr::of_csr(&self.row_ptr)
    }
    /// Column indices, row by row, increasing within each row.
    pub fn col_idx(&self) -> &[u32] {
        &self.col_idx
    }
    /// Values, parallel to [`Csr::col_idx`].
    pub fn values(&self) -> &[T] {
        &self.values
    }
    /// Band and sampled column distances, gathered when the matrix was built.
    pub fn column_facts(&self) -> ColumnFacts {
        self.columns
    }
    /// Row-length statistics and histogram, gathered when the matrix was built.
    pub fn row_facts(&self) -> RowFacts {
        self.lengths
    }
    /// Number of stored entries of row `r`.
    pub fn row_len(&self, r: usize) -> usize {
        (self.row_ptr[r + 1] - self.row_ptr[r]) as usize
    }
    /// Column indices and values of row `r`.
    pub fn row(&self, r: usize) -> (&[u32], &[T]) {
        let (s, e) = (self.row_ptr[r] as usize, self.row_ptr[r + 1] as usize);
        (&self.col_idx[s..e], &self.values[s..e])
    }
    /// Takes the matrix apart into `(nrows, ncols, row_ptr, col_idx, values)`.
    pub fn into_parts(self) -> (usize, usize, Vec<u32>, Vec<u32>, Vec<T>) {
        (
            self.nrows,
            self.ncols,
            self.row_ptr,
            self.col_idx,
            self.values,
        )
    }

    /// The same pattern with values converted to another precision.
    pub fn cast<U: Scalar>(&self) -> Csr<U> {
        Csr {
            nrows: self.nrows,
            ncols: self.ncols,
            row_ptr: self.row_ptr.clone(),
            col_idx: self.col_idx.clone(),
            values: self
                .values
                .iter()
                .map(|v| U::from_f64(v.to_f64()))
                .collect(),
            columns: self.columns,
            lengths: self.lengths,
        }
    }

    /// Aᵀ, built by counting the columns (O(nnz + ncols)): its rows are this
    /// matrix's columns, each with its entries in increasing row order.
    pub fn transpose(&self) -> Csr<T> {
        let mut ptr = vec![0u32; self.ncols + 1];
        for &c in &self.col_idx {
            ptr[c as usize + 1] += 1;
        }
        for j in 0..self.ncols {
            ptr[j + 1] += ptr[j];
        }
        let mut next: Vec<u32> = ptr[..self.ncols].to_vec();
        let mut cols = vec![0u32; self.col_idx.len()];
        let mut vals = vec![T::zero(); self.values.len()];
        for r in 0..self.nrows {
            for k in self.row_ptr[r] as usize..self.row_ptr[r + 1] as usize {
                let c = self.col_idx[k] as usize;
                let at = next[c] as usize;
                cols[at] = r as u32;
                vals[at] = self.values[k];
                next[c] += 1;
            }
        }
        Csr::try_new(self.ncols, self.nrows, ptr, cols, vals)
            .expect("the transpose of a valid CSR matrix is valid")
    }

    /// Returns an error naming the first NaN or infinite value, if any.
    pub fn check_finite(&self) -> Result<(), SparseError> {
        for r in 0..self.nrows {
            let (cols, vals) = self.row(r);
            for (c, v) in cols.iter().zip(vals) {
                if !v.is_finite() {
                    return Err(SparseError::NonFinite {
                        row: r,
                        col: *c as usize,
                        value: v.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Bytes the matrix occupies on the host (and, uploaded, on a device).
    pub fn bytes(&self) -> usize {
        (self.row_ptr.len() + self.col_idx.len()) * 4 + self.values.len() * T::BYTES
    }

    /// A content id: the hex BLAKE3 hash of the dimensions (`u64`), the row
    /// pointer and column indices (`u32`) and the values as `f64`, all little-endian,
    /// so that the same matrix has the same id whatever precision it was read in.
    /// The bytes are fed in blocks, not element by element (BLAKE3 is fast on
    /// long inputs; a 10M-nonzero matrix hashes in tens of milliseconds).
    pub fn content_hash(&self) -> String {
        let mut h = blake3::Hasher::new();
        h.update(&(self.nrows as u64).to_le_bytes());
        h.update(&(self.ncols as u64).to_le_bytes());
        hash_blocks(&mut h, &self.row_ptr, |p| p.to_le_bytes());
        hash_blocks(&mut h, &self.col_idx, |c| c.to_le_bytes());
        hash_blocks(&mut h, &self.values, |v| v.to_f64().to_le_bytes());
        h.finalize().to_hex().to_string()
    }

    /// Row lengths, one per row.
    pub fn row_lengths(&self) -> impl Iterator<Item = usize> + '_ {
        self.row_ptr.windows(2).map(|w| (w[1] - w[0]) as usize)
    }
}

/// Feeds `items` to `h` as their byte encodings, through a fixed buffer.
fn hash_blocks<E: Copy, const N: usize>(
    h: &mut blake3::Hasher,
    items: &[E],
    bytes: impl Fn(E) -> [u8; N],
) {
    let mut buf = Vec::with_capacity(N * 8192);
    for chunk in items.chunks(8192) {
        buf.clear();
        for &e in chunk {
            buf.extend_from_slice(&bytes(e));
        }
        h.update(&buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_swaps_rows_and_columns_and_twice_is_the_same() {
        // 2 x 3: [[1, 0, 2], [0, 3, 0]] with an empty column-free row pattern.
        let a =
            Csr::<f64>::try_new(2, 3, vec![0, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0]).unwrap();
        let t = a.transpose();
        assert_eq!((t.nrows(), t.ncols()), (3, 2));
        assert_eq!(t.row_ptr(), &[0, 1, 2, 3]);
        assert_eq!(t.col_idx(), &[0, 1, 0]);
        assert_eq!(t.values(), &[1.0, 3.0, 2.0]);
        let back = t.transpose();
        assert_eq!(back.row_ptr(), a.row_ptr());
        assert_eq!(back.col_idx(), a.col_idx());
        assert_eq!(back.values(), a.values());
        let empty = Csr::<f32>::try_new(0, 4, vec![0], vec![], vec![])
            .unwrap()
            .transpose();
        assert_eq!((empty.nrows(), empty.ncols(), empty.nnz()), (4, 0, 0));
    }

    #[test]
    fn try_new_sorts_and_sums_duplicates() {
        let m = Csr::<f64>::try_new(
            2,
            3,
            vec![0, 3, 4],
            vec![2, 0, 2, 1],
            vec![1.0, 2.0, 3.0, 4.0],
        )
        .unwrap();
        assert_eq!(m.row_ptr(), &[0, 2, 3]);
        assert_eq!(m.col_idx(), &[0, 2, 1]);
        assert_eq!(m.values(), &[2.0, 4.0, 4.0]);
    }

    #[test]
    fn try_new_rejects_each_broken_invariant() {
        use SparseError::*;
        let e = |r: Result<Csr<f32>, SparseError>| r.unwrap_err();
        assert!(matches!(
            e(Csr::try_new(2, 2, vec![0, 1], vec![0], vec![1.0])),
            RowPtrLength { .. }
        ));
        assert!(matches!(
            e(Csr::try_new(1, 2, vec![1, 1], vec![0], vec![1.0])),
            RowPtrStart(1)
        ));
        assert!(matches!(
            e(Csr::try_new(
                2,
                2,
                vec![0, 2, 1],
                vec![0, 1],
                vec![1.0, 1.0]
            )),
            RowPtrDecreasing { row: 1, .. }
        ));
        assert!(matches!(
            e(Csr::try_new(1, 2, vec![0, 2], vec![0], vec![1.0])),
            RowPtrEnd { .. }
        ));
        assert!(matches!(
            e(Csr::try_new(1, 2, vec![0, 1], vec![0], vec![])),
            LengthMismatch { .. }
        ));
        assert!(matches!(
            e(Csr::try_new(1, 2, vec![0, 1], vec![2], vec![1.0])),
            ColumnOutOfRange {
                row: 0,
                col: 2,
                ncols: 2
            }
        ));
        assert!(matches!(
            e(Csr::zeros(MAX_DIM + 1, 1)),
            TooLarge { what: "rows", .. }
        ));
    }

    #[test]
    fn triplets_in_any_order_with_duplicates() {
        let m =
            Csr::<f64>::from_triplets(3, 3, &[2, 0, 2, 0], &[1, 2, 1, 0], &[1.0, 2.0, 3.0, 4.0])
                .unwrap();
        assert_eq!(m.row_ptr(), &[0, 2, 2, 3]);
        assert_eq!(m.col_idx(), &[0, 2, 1]);
        assert_eq!(m.values(), &[4.0, 2.0, 4.0]);
        assert!(matches!(
            Csr::<f64>::from_triplets(1, 1, &[1], &[0], &[1.0]),
            Err(SparseError::RowOutOfRange { row: 1, nrows: 1 })
        ));
    }

    #[test]
    fn content_hash_is_blake3_of_the_documented_bytes() {
        let a =
            Csr::<f64>::from_triplets(2, 3, &[0, 1, 1], &[2, 0, 1], &[1.5, -2.0, 0.25]).unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&2u64.to_le_bytes());
        bytes.extend_from_slice(&3u64.to_le_bytes());
        for p in [0u32, 1, 3] {
            bytes.extend_from_slice(&p.to_le_bytes());
        }
        for c in [2u32, 0, 1] {
            bytes.extend_from_slice(&c.to_le_bytes());
        }
        for v in [1.5f64, -2.0, 0.25] {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        let want = blake3::hash(&bytes).to_hex().to_string();
        assert_eq!(a.content_hash(), want);
        assert_eq!(want.len(), 64);
    }

    #[test]
    fn content_hash_ignores_precision() {
        let a = Csr::<f64>::identity(4).unwrap();
        assert_eq!(a.content_hash(), a.cast::<f32>().content_hash());
        assert_ne!(
            a.content_hash(),
            Csr::<f64>::identity(5).unwrap().content_hash()
        );
    }
}
