//! An `application/vnd.spmv-select.csr` /spmv body (the matrix with x) into a
//! typed request.

use super::request::{assemble, Options, SpmvRequest};
use crate::domain::config::Limits;
use crate::domain::csr_binary;
use crate::domain::error::ApiError;
use crate::http::input::Query;

/// An /spmv binary CSR body, which must carry x (parsed on a blocking thread).
pub fn binary_csr_request(
    q: &Query,
    bytes: &[u8],
    limits: &Limits,
) -> Result<SpmvRequest, ApiError> {
    let (a, x) = csr_binary::parse(bytes, limits)?;
    let x = x.ok_or_else(|| {
        ApiError::Unprocessable(
            "no x: an inline binary CSR body for /spmv carries x after the values \
             (set flag bit 0 of the header and append ncols values)"
                .into(),
        )
    })?;
    assemble(q, Some(a), None, Some(x), Options::default())
}
