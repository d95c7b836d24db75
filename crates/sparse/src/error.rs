//! The one error type of the sparse crate.

use thiserror::Error;

/// Everything that can go wrong building, reading or analysing a sparse matrix.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SparseError {
    /// A dimension or the nonzero count does not fit the 32-bit signed indices
    /// the device kernels use (at most [`crate::MAX_DIM`]).
    #[error("{what} = {value} does not fit 32-bit device indices (at most {max})")]
    TooLarge {
        /// Which quantity: `rows`, `cols` or `nnz`.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// `row_ptr` must hold `nrows + 1` entries.
    #[error("row_ptr has {found} entries, expected nrows + 1 = {expected}")]
    RowPtrLength {
        /// `nrows + 1`.
        expected: usize,
        /// The length given.
        found: usize,
    },
    /// `row_ptr[0]` must be 0.
    #[error("row_ptr[0] is {0}, expected 0")]
    RowPtrStart(u32),
    /// `row_ptr` must never decrease.
    #[error("row_ptr decreases at row {row}: row_ptr[{row}] = {start} > row_ptr[{next}] = {end}", next = row + 1)]
    RowPtrDecreasing {
        /// The row whose end lies before its start.
        row: usize,
        /// `row_ptr[row]`.
        start: u32,
        /// `row_ptr[row + 1]`.
        end: u32,
    },
    /// The last entry of `row_ptr` must equal the number of nonzeros.
    #[error("row_ptr ends at {found} but there are {nnz} column indices")]
    RowPtrEnd {
        /// `row_ptr[nrows]`.
        found: u32,
        /// `col_idx.len()`.
        nnz: usize,
    },
    /// `col_idx` and `values` must have the same length.
    #[error("col_idx has {cols} entries but values has {values}")]
    LengthMismatch {
        /// `col_idx.len()`.
        cols: usize,
        /// `values.len()`.
        values: usize,
    },
    /// A column index is not below `ncols`.
    #[error("column index {col} in row {row} is out of range (ncols = {ncols})")]
    ColumnOutOfRange {
        /// The row holding the bad entry.
        row: usize,
        /// The column index found.
        col: u64,
        /// The number of columns.
        ncols: usize,
    },
    /// A row index of a triplet is not below `nrows`.
    #[error("row index {row} is out of range (nrows = {nrows})")]
    RowOutOfRange {
        /// The row index found.
        row: u64,
        /// The number of rows.
        nrows: usize,
    },
    /// A value is NaN or infinite where finite values are required.
    #[error("value at row {row}, column {col} is not finite ({value})")]
    NonFinite {
        /// Row of the value.
        row: usize,
        /// Column of the value.
        col: usize,
        /// The value, printed.
        value: String,
    },
    /// A Matrix Market file is malformed; `line` is 1-based (0 when the problem
    /// is the file as a whole, such as an I/O error).
    #[error("line {line}: {message}")]
    Parse {
        /// 1-based line number where the problem was found.
        line: usize,
        /// What is wrong, in words.
        message: String,
        /// Machine-readable kind of problem.
        kind: ParseErrorKind,
    },
    /// A generator or analysis parameter is out of its domain.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
}

/// The kinds of Matrix Market problems, so that tests and callers can match on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// The file is empty.
    Empty,
    /// The first line is not a `%%MatrixMarket matrix ...` banner.
    BadBanner,
    /// Format other than `coordinate` or `array`.
    UnsupportedFormat,
    /// Field other than `real`, `integer`, `pattern`, `complex` (or `double`).
    UnsupportedField,
    /// Symmetry other than `general`, `symmetric`, `skew-symmetric`, `hermitian`.
    UnsupportedSymmetry,
    /// A complex matrix was given and the caller did not ask for the real part.
    ComplexNotAllowed,
    /// A combination the format forbids (pattern array, hermitian real, ...).
    InvalidCombination,
    /// The size line is missing or malformed.
    BadSizeLine,
    /// A symmetric, skew-symmetric or hermitian matrix is not square.
    NotSquare,
    /// A data line has the wrong number of fields.
    WrongFieldCount,
    /// A field that should be a number is not one.
    NonNumeric,
    /// A row or column index is outside the declared dimensions (or zero).
    IndexOutOfRange,
    /// A skew-symmetric matrix has a diagonal entry, or a symmetric one an upper-triangle entry.
    TriangleViolation,
    /// The file ends before the declared number of entries.
    Truncated,
    /// The file holds more entries than declared.
    TooManyEntries,
    /// Dimensions or nonzero count too large for 32-bit device indices.
    TooLarge,
    /// The file could not be read.
    Io,
    /// Gzip data is corrupt or truncated.
    Gzip,
    /// The bytes are not UTF-8 text.
    NotUtf8,
    /// Gzip data that decompresses to gzip again (only one layer is accepted).
    NestedGzip,
    /// The size line declares more rows, columns or entries than the text after
    /// it can hold (see `mm::SizeLimits`).
    ExceedsData,
}

impl SparseError {
    /// Builds a [`SparseError::Parse`].
    pub fn parse(line: usize, kind: ParseErrorKind, message: impl Into<String>) -> Self {
        SparseError::Parse {
            line,
            message: message.into(),
            kind,
        }
    }
}
