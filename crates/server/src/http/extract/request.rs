//! The typed /spmv request ([`SpmvRequest`]) every body form becomes, and how
//! the query and the body's fields are merged into it.

use crate::device::vector::XIn;
use crate::domain::error::ApiError;
use crate::http::input::{Precision, Query};
use crate::service::state::StoredMatrix;
use sparse::Csr;
use std::sync::Arc;

/// Where the matrix of an /spmv request comes from.
pub enum Source {
    /// Given in the request (boxed: a matrix carries its row and column
    /// facts inline, a few hundred bytes beside the other variants).
    Inline(Box<Csr<f64>>),
    /// Uploaded before with POST /matrices.
    Id(String),
    /// The transpose of a matrix uploaded before (`?transpose=true`).
    Transposed(String),
    /// Uploaded, already looked up and on the device before x was received
    /// ([`crate::http::extract::binary_x`]); with its set-up time when this request uploaded it.
    Ready(Arc<StoredMatrix>, Option<f64>),
}

/// A parsed /spmv request.
pub struct SpmvRequest {
    /// The matrix.
    pub source: Source,
    /// x, as given.
    pub x: XIn,
    /// The precision asked for.
    pub precision: Precision,
    /// Whether to check y against the reference SpMV.
    pub verify: bool,
    /// How often the client expects to multiply by an inline matrix (`None`:
    /// once); an uploaded matrix keeps its upload's figure.
    pub expected_calls: Option<u64>,
}

/// The uploaded matrix `id`, or its transpose with `?transpose=true`.
pub fn id_source(q: &Query, id: String) -> Source {
    if q.transpose == Some(true) {
        Source::Transposed(id)
    } else {
        Source::Id(id)
    }
}

fn merge<T: PartialEq + std::fmt::Debug>(
    name: &str,
    query: Option<T>,
    body: Option<T>,
) -> Result<Option<T>, ApiError> {
    match (query, body) {
        (Some(a), Some(b)) if a != b => Err(ApiError::BadRequest(format!(
            "'{name}' is given twice with different values ({a:?} in the query, {b:?} in the body)"
        ))),
        (a, b) => Ok(b.or(a)),
    }
}

/// The fields of an /spmv request besides the matrix and x, as the body gave them.
#[derive(Default)]
pub struct Options {
    pub precision: Option<Precision>,
    pub verify: Option<bool>,
    pub expected_calls: Option<u64>,
}

/// The request from the query and what the body gave: each field given in
/// both must agree; exactly one of an inline matrix and a matrix id.
pub fn assemble(
    q: &Query,
    matrix: Option<Csr<f64>>,
    matrix_id: Option<String>,
    x: Option<Vec<f64>>,
    o: Options,
) -> Result<SpmvRequest, ApiError> {
    let Options {
        precision,
        verify,
        expected_calls,
    } = o;
    let expected_calls = merge("expected_calls", q.expected_calls, expected_calls)?;
    let precision = merge("precision", q.precision, precision)?.unwrap_or(Precision::DEFAULT);
    let verify = merge("verify", q.verify, verify)?.unwrap_or(false);
    let matrix_id = merge("matrix_id", q.matrix_id.clone(), matrix_id)?;
    let source = match (matrix, matrix_id) {
        (Some(_), Some(_)) => {
            return Err(ApiError::BadRequest(
                "give either an inline matrix or a matrix_id, not both".into(),
            ))
        }
        (Some(a), None) => Source::Inline(Box::new(a)),
        (None, Some(id)) => id_source(q, id),
        (None, None) => {
            return Err(ApiError::Unprocessable(
                "no matrix: give 'matrix' (Matrix Market text or CSR object) or 'matrix_id' (from POST /matrices)".into(),
            ))
        }
    };
    if q.transpose == Some(true) && matches!(source, Source::Inline(_)) {
        return Err(ApiError::Unprocessable(
            "transpose=true applies to an uploaded matrix (matrix_id): upload it with \
             POST /matrices, or send the transpose inline"
                .into(),
        ));
    }
    let x = x.ok_or_else(|| {
        ApiError::Unprocessable("no x: give 'x' as a JSON array of numbers".into())
    })?;
    Ok(SpmvRequest {
        source,
        x: XIn::Values(x),
        precision,
        verify,
        expected_calls,
    })
}
