//! Sparse core: the CSR matrix type, Matrix Market I/O, the reference SpMV,
//! matrix features, virtual-row binning and synthetic matrix generators.
//!
//! Architecture invariant: this crate knows nothing of OpenCL, HTTP or SQL.
//! Everything outside data enters through [`Csr::try_new`], [`Csr::from_triplets`]
//! or the Matrix Market reader, which validate once; everything inside trusts the type.

pub mod binning;
pub mod csr;
pub mod error;
pub mod extra_features;
pub mod features;
pub mod gen;
pub mod locality;
pub mod mm;
pub mod plan;
pub mod precision;
pub mod scalar;
pub mod spmv;
pub mod testing;
mod threads;

pub use binning::{BinSizes, Binning, RowPtr, Scheme, MAX_BIN, NUM_BINS, U_LADDER};
pub use csr::{Csr, MAX_DIM};
pub use error::SparseError;
pub use features::{Features, RowFacts, FEATURE_NAMES};
pub use locality::ColumnFacts;
pub use plan::{KernelId, Plan};
pub use precision::{ParsePrecisionError, Precision, Precisions};
pub use scalar::Scalar;
