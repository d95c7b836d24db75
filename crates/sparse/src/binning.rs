//! Virtual-row binning (paper 000, Algorithm 2) and the single-bin scheme.
//!
//! For granularity U, virtual row i covers rows `[iU, min((i+1)U, m))`; its
//! workload is the nonzeros of those rows; its bin is
//! `min(floor(workload / U), MAX_BIN)`, so bin b holds virtual rows whose mean row
//! length lies in `[b, b+1)` and the last bin everything longer. A bin stores the
//! first row of each of its virtual rows, in increasing order.

use crate::SparseError;
use std::fmt;
use std::str::FromStr;

/// Number of bins of a granularity scheme.
pub const NUM_BINS: usize = 100;
/// Index of the last bin, which holds every virtual row of mean length >= 99.
pub const MAX_BIN: usize = NUM_BINS - 1;
/// The preset ladder of granularities U.
pub const U_LADDER: [u32; 16] = [
    10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000,
    500_000, 1_000_000,
];

/// Whether `row_ptr` never decreases, so that binning it cannot underflow.
/// Checked in chunks with no early exit inside one, so that the comparison
/// vectorises (a plain `windows(2).all(..)` stops to test every pair).
pub fn row_ptr_is_monotone(row_ptr: &[u32]) -> bool {
    const CHUNK: usize = 4096;
    let pairs = row_ptr.len().saturating_sub(1);
    (0..pairs.div_ceil(CHUNK)).all(|c| {
        let (lo, hi) = (c * CHUNK, ((c + 1) * CHUNK).min(pairs));
        let falls = row_ptr[lo..hi]
            .iter()
            .zip(&row_ptr[lo + 1..=hi])
            .fold(0u32, |n, (a, b)| n | u32::from(a > b));
        falls == 0
    })
}

/// A CSR row pointer with whether it never decreases, known once: binning one
/// that decreases could underflow, so the selector bins such a pointer with the
/// single-bin scheme only. A slice is checked when converted (O(rows), the
/// vectorising [`row_ptr_is_monotone`]); a [`crate::Csr`]'s is known
/// non-decreasing by construction ([`crate::Csr::rows`]), so planning a stored
/// matrix does not read its whole row pointer again.
#[derive(Debug, Clone, Copy)]
pub struct RowPtr<'a> {
    row_ptr: &'a [u32],
    monotone: bool,
}

impl<'a> RowPtr<'a> {
    /// A `Csr`'s row pointer, whose invariant already says it never decreases.
    pub(crate) fn of_csr(row_ptr: &'a [u32]) -> Self {
        debug_assert!(row_ptr_is_monotone(row_ptr));
        RowPtr {
            row_ptr,
            monotone: true,
        }
    }

    /// The row pointer.
    pub fn as_slice(&self) -> &'a [u32] {
        self.row_ptr
    }

    /// Whether it never decreases.
    pub fn is_monotone(&self) -> bool {
        self.monotone
    }

    /// Number of rows (`len - 1`, or 0 for an empty pointer).
    pub fn nrows(&self) -> usize {
        self.row_ptr.len().saturating_sub(1)
    }
}

impl<'a> From<&'a [u32]> for RowPtr<'a> {
    fn from(row_ptr: &'a [u32]) -> Self {
        RowPtr {
            row_ptr,
            monotone: row_ptr_is_monotone(row_ptr),
        }
    }
}

impl<'a> From<&'a Vec<u32>> for RowPtr<'a> {
    fn from(row_ptr: &'a Vec<u32>) -> Self {
        RowPtr::from(row_ptr.as_slice())
    }
}

impl<'a, const N: usize> From<&'a [u32; N]> for RowPtr<'a> {
    fn from(row_ptr: &'a [u32; N]) -> Self {
        RowPtr::from(row_ptr.as_slice())
    }
}

/// How rows are split into bins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// All rows in one bin (bin 0).
    Single,
    /// Virtual rows of U neighbouring rows, binned by mean length.
    Granularity(u32),
}

impl Scheme {
    /// Every candidate scheme: the single-bin scheme, then the U ladder.
    pub fn all() -> Vec<Scheme> {
        std::iter::once(Scheme::Single)
            .chain(U_LADDER.iter().map(|&u| Scheme::Granularity(u)))
            .collect()
    }

    /// A number for the scheme usable as a model feature or label: 0 for single, else U.
    pub fn code(self) -> u32 {
        match self {
            Scheme::Single => 0,
            Scheme::Granularity(u) => u,
        }
    }

    /// Inverse of [`Scheme::code`].
    pub fn from_code(code: u32) -> Scheme {
        if code == 0 {
            Scheme::Single
        } else {
            Scheme::Granularity(code)
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scheme::Single => write!(f, "single"),
            Scheme::Granularity(u) => write!(f, "{u}"),
        }
    }
}

impl FromStr for Scheme {
    type Err = SparseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        if t == "single" || t == "0" {
            return Ok(Scheme::Single);
        }
        let t = t
            .strip_prefix("u=")
            .or_else(|| t.strip_prefix('u'))
            .unwrap_or(&t);
        match t.parse::<u32>() {
            Ok(u) if u > 0 => Ok(Scheme::Granularity(u)),
            _ => Err(SparseError::InvalidParameter(format!(
                "scheme '{s}' is neither 'single' nor a positive granularity U"
            ))),
        }
    }
}

impl serde::Serialize for Scheme {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Scheme {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            N(u32),
        }
        match Raw::deserialize(d)? {
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
            Raw::N(n) => Ok(Scheme::from_code(n)),
        }
    }
}

/// The bins of a matrix under one scheme.
#[derive(Debug, Clone, PartialEq)]
pub struct Binning {
    /// The scheme that produced it.
    pub scheme: Scheme,
    /// Rows of the matrix.
    pub nrows: usize,
    /// Rows per virtual row: U, or `nrows` for the single-bin scheme.
    pub u: usize,
    /// Per bin, the first rows of its virtual rows, increasing.
    pub bins: Vec<Vec<u32>>,
    /// Per bin, its number of nonzeros.
    pub bin_nnz: Vec<u64>,
}

impl Binning {
    /// Bins the rows of a CSR pattern (given by its `row_ptr`) under `scheme`.
    pub fn new(row_ptr: &[u32], scheme: Scheme) -> Binning {
        let nrows = row_ptr.len().saturating_sub(1);
        match scheme {
            Scheme::Single => Binning {
                scheme,
                nrows,
                u: nrows.max(1),
                bins: vec![if nrows > 0 { vec![0] } else { vec![] }],
                bin_nnz: vec![row_ptr.last().copied().unwrap_or(0) as u64],
            },
            Scheme::Granularity(u) => {
                let u = u.max(1) as usize;
                let mut bins: Vec<Vec<u32>> = vec![Vec::new(); NUM_BINS];
                let mut bin_nnz = vec![0u64; NUM_BINS];
                for (first, b, wl) in virtual_rows(row_ptr, u) {
                    bins[b].push(first as u32);
                    bin_nnz[b] += wl;
                }
                Binning {
                    scheme,
                    nrows,
                    u,
                    bins,
                    bin_nnz,
                }
            }
        }
    }

    /// The rows and nonzeros of each bin (as [`BinSizes::new`] gives them).
    pub fn sizes(&self) -> BinSizes {
        BinSizes {
            scheme: self.scheme,
            nrows: self.nrows,
            rows: (0..self.num_bins())
                .map(|b| self.row_count(b) as u64)
                .collect(),
            nnz: self.bin_nnz.clone(),
        }
    }

    /// Number of bins (100, or 1 for the single-bin scheme).
    pub fn num_bins(&self) -> usize {
        self.bins.len()
    }

    /// Ids of the bins holding at least one row.
    pub fn nonempty_bins(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.bins.len()).filter(|&b| !self.bins[b].is_empty())
    }

    /// Rows of virtual row starting at `first`.
    fn virtual_rows(&self, first: u32) -> std::ops::Range<u32> {
        first..(first as usize + self.u).min(self.nrows) as u32
    }

    /// Number of rows in bin `b`.
    pub fn row_count(&self, b: usize) -> usize {
        self.bins[b]
            .iter()
            .map(|&f| self.virtual_rows(f).len())
            .sum()
    }

    /// The rows of bin `b`, increasing.
    pub fn rows(&self, b: usize) -> impl Iterator<Item = u32> + '_ {
        self.bins[b].iter().flat_map(move |&f| self.virtual_rows(f))
    }

    /// The rows of bin `b` as a vector.
    pub fn expand(&self, b: usize) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.row_count(b));
        v.extend(self.rows(b));
        v
    }
}

/// The virtual rows of granularity `u` as (first row, bin, nonzeros), in
/// order: Algorithm 2's assignment, written once for [`Binning::new`] and
/// [`BinSizes::new`].
fn virtual_rows(row_ptr: &[u32], u: usize) -> impl Iterator<Item = (usize, usize, u64)> + '_ {
    let nrows = row_ptr.len().saturating_sub(1);
    (0..nrows.div_ceil(u)).map(move |v| {
        let first = v * u;
        let last = (first + u).min(nrows);
        let wl = (row_ptr[last] - row_ptr[first]) as usize;
        (first, (wl / u).min(MAX_BIN), wl as u64)
    })
}

/// What binning a matrix under a scheme gives each bin, without the lists
/// of its virtual rows: all that choosing a kernel per bin reads. A plan
/// whose bins all choose one kernel runs it over every row as one range, so
/// the selector builds the lists ([`Binning::new`], a vector push per virtual
/// row) only for a plan that keeps its bins.
#[derive(Debug, Clone, PartialEq)]
pub struct BinSizes {
    /// The scheme.
    pub scheme: Scheme,
    /// Rows of the matrix.
    pub nrows: usize,
    /// Per bin (as many as [`Binning::num_bins`]), its rows.
    pub rows: Vec<u64>,
    /// Per bin, its nonzeros.
    pub nnz: Vec<u64>,
}

impl BinSizes {
    /// The sizes of the bins of a CSR pattern (given by its `row_ptr`) under
    /// `scheme`: the same as [`Binning::new`] followed by [`Binning::sizes`].
    pub fn new(row_ptr: &[u32], scheme: Scheme) -> BinSizes {
        let nrows = row_ptr.len().saturating_sub(1);
        let (rows, nnz) = match scheme {
            Scheme::Single => (
                vec![nrows as u64],
                vec![row_ptr.last().copied().unwrap_or(0) as u64],
            ),
            Scheme::Granularity(u) => {
                let u = u.max(1) as usize;
                let (mut rows, mut nnz) = (vec![0u64; NUM_BINS], vec![0u64; NUM_BINS]);
                for (first, b, wl) in virtual_rows(row_ptr, u) {
                    rows[b] += ((first + u).min(nrows) - first) as u64;
                    nnz[b] += wl;
                }
                (rows, nnz)
            }
        };
        BinSizes {
            scheme,
            nrows,
            rows,
            nnz,
        }
    }

    /// Ids of the bins holding at least one row.
    pub fn nonempty_bins(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.rows.len()).filter(|&b| self.rows[b] > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn row_ptr_of(lens: &[u32]) -> Vec<u32> {
        let mut rp = vec![0];
        for l in lens {
            rp.push(rp.last().unwrap() + l);
        }
        rp
    }

    #[test]
    fn row_ptr_from_a_slice_is_checked_and_from_a_csr_is_known() {
        let good = row_ptr_of(&[2, 0, 3]);
        let rp = RowPtr::from(&good);
        assert!(rp.is_monotone());
        assert_eq!((rp.nrows(), rp.as_slice()), (3, good.as_slice()));
        assert!(!RowPtr::from(&[0u32, 5, 3, 9]).is_monotone());
        // A fall past the first vectorised chunk is found too.
        let mut long: Vec<u32> = (0..10_000).collect();
        long[9_000] = 0;
        assert!(!RowPtr::from(&long).is_monotone());
        let empty: &[u32] = &[];
        assert_eq!(RowPtr::from(empty).nrows(), 0);
        let a = crate::Csr::<f64>::from_triplets(3, 4, &[0, 2], &[1, 3], &[1.0, 2.0]).unwrap();
        let rows = a.rows();
        assert!(rows.is_monotone());
        assert_eq!(rows.as_slice(), a.row_ptr());
    }

    #[test]
    fn algorithm_2_by_hand() {
        // U = 2: virtual rows {0,1} (3 nnz -> bin 1), {2,3} (0 -> bin 0), {4} (7 -> bin 3).
        let rp = row_ptr_of(&[1, 2, 0, 0, 7]);
        let b = Binning::new(&rp, Scheme::Granularity(2));
        assert_eq!(b.bins[1], vec![0]);
        assert_eq!(b.bins[0], vec![2]);
        assert_eq!(b.bins[3], vec![4]);
        assert_eq!(b.nonempty_bins().collect::<Vec<_>>(), vec![0, 1, 3]);
        assert_eq!(b.expand(3), vec![4]);
        assert_eq!(b.bin_nnz[3], 7);
        // Long rows are capped at the last bin.
        let rp = row_ptr_of(&[500, 1]);
        let b = Binning::new(&rp, Scheme::Granularity(1));
        assert_eq!(b.bins[MAX_BIN], vec![0]);
        assert_eq!(b.bins[1], vec![1]);
    }

    #[test]
    fn monotone_row_pointers() {
        assert!(row_ptr_is_monotone(&[]));
        assert!(row_ptr_is_monotone(&[5]));
        let mut rp: Vec<u32> = (0..10_000u32).map(|r| r / 3).collect();
        assert!(row_ptr_is_monotone(&rp));
        // A fall anywhere, chunk edges included, is found.
        for at in [1, 4095, 4096, 4097, 9999] {
            let keep = rp[at];
            rp[at] = rp[at - 1].wrapping_sub(1);
            assert!(!row_ptr_is_monotone(&rp), "fall at {at}");
            assert_eq!(
                row_ptr_is_monotone(&rp),
                rp.windows(2).all(|w| w[0] <= w[1])
            );
            rp[at] = keep;
        }
    }

    #[test]
    fn single_and_empty() {
        let rp = row_ptr_of(&[3, 0, 2]);
        let b = Binning::new(&rp, Scheme::Single);
        assert_eq!(b.num_bins(), 1);
        assert_eq!(b.expand(0), vec![0, 1, 2]);
        let e = Binning::new(&[0], Scheme::Single);
        assert_eq!(e.nonempty_bins().count(), 0);
        let e = Binning::new(&[0], Scheme::Granularity(10));
        assert_eq!(e.nonempty_bins().count(), 0);
    }

    #[test]
    fn scheme_text_round_trip() {
        for s in Scheme::all() {
            assert_eq!(s.to_string().parse::<Scheme>().unwrap(), s);
            assert_eq!(Scheme::from_code(s.code()), s);
        }
        assert!("0x".parse::<Scheme>().is_err());
        assert_eq!("U=20".parse::<Scheme>().unwrap(), Scheme::Granularity(20));
    }

    proptest! {
        #[test]
        fn every_row_in_exactly_one_bin(lens in proptest::collection::vec(0u32..300, 0..400), ui in 0usize..17) {
            let rp = row_ptr_of(&lens);
            let scheme = if ui == 16 { Scheme::Single } else { Scheme::Granularity([1, 2, 3, 7, 10, 20, 50, 100, 200, 500, 1000, 2, 5, 9, 13, 64][ui]) };
            let b = Binning::new(&rp, scheme);
            let mut seen = vec![0u32; lens.len()];
            let mut total_rows = 0;
            let mut total_nnz = 0u64;
            for bin in 0..b.num_bins() {
                let rows = b.expand(bin);
                prop_assert_eq!(rows.len(), b.row_count(bin));
                total_rows += rows.len();
                let nnz: u64 = rows.iter().map(|&r| lens[r as usize] as u64).sum();
                prop_assert_eq!(nnz, b.bin_nnz[bin]);
                total_nnz += nnz;
                for w in rows.windows(2) { prop_assert!(w[0] < w[1]); }
                for r in rows { seen[r as usize] += 1; }
                if let Scheme::Granularity(u) = scheme {
                    for &f in &b.bins[bin] {
                        prop_assert_eq!(f as usize % u as usize, 0);
                        let last = (f as usize + u as usize).min(lens.len());
                        let wl: usize = lens[f as usize..last].iter().map(|&l| l as usize).sum();
                        prop_assert_eq!((wl / u as usize).min(MAX_BIN), bin);
                    }
                }
            }
            prop_assert!(seen.iter().all(|&s| s == 1));
            prop_assert_eq!(BinSizes::new(&rp, scheme), b.sizes());
            prop_assert_eq!(
                BinSizes::new(&rp, scheme).nonempty_bins().collect::<Vec<_>>(),
                b.nonempty_bins().collect::<Vec<_>>()
            );
            prop_assert_eq!(total_rows, lens.len());
            prop_assert_eq!(total_nnz, *rp.last().unwrap() as u64);
        }
    }
}
