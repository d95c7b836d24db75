//! An `application/json` /spmv body into a typed request: deserialised straight
//! into typed fields (the matrix as `matrix`, `matrix_id` or top-level CSR).

use super::request::{assemble, Options, SpmvRequest};
use crate::domain::config::Limits;
use crate::domain::error::ApiError;
use crate::http::input::{expected_calls_json, CsrJson, MatrixField, Query};
use axum::body::Bytes;
use serde::Deserialize;

/// The JSON body of /spmv: the matrix as `matrix` (Matrix Market text or a CSR
/// object), as `matrix_id`, or as CSR fields at the top level beside `x`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpmvJson {
    matrix: Option<MatrixField>,
    matrix_id: Option<String>,
    x: Option<Vec<f64>>,
    precision: Option<String>,
    verify: Option<bool>,
    expected_calls: Option<serde_json::Value>,
    nrows: Option<u64>,
    ncols: Option<u64>,
    row_ptr: Option<Vec<u64>>,
    col_idx: Option<Vec<u64>>,
    values: Option<Vec<f64>>,
}

impl SpmvJson {
    /// The top-level CSR fields as one matrix, when any is given (all five are then needed).
    fn flat_csr(&mut self) -> Result<Option<CsrJson>, ApiError> {
        let any = self.nrows.is_some()
            || self.ncols.is_some()
            || self.row_ptr.is_some()
            || self.col_idx.is_some()
            || self.values.is_some();
        if !any {
            return Ok(None);
        }
        if self.matrix.is_some() {
            return Err(ApiError::BadRequest(
                "give the matrix either as 'matrix' or as top-level CSR fields, not both".into(),
            ));
        }
        let missing =
            |f: &str| ApiError::Unprocessable(format!("top-level CSR matrix without '{f}'"));
        Ok(Some(CsrJson {
            nrows: self.nrows.take().ok_or_else(|| missing("nrows"))?,
            ncols: self.ncols.take().ok_or_else(|| missing("ncols"))?,
            row_ptr: self.row_ptr.take().ok_or_else(|| missing("row_ptr"))?,
            col_idx: self.col_idx.take().ok_or_else(|| missing("col_idx"))?,
            values: self.values.take().ok_or_else(|| missing("values"))?,
        }))
    }
}

/// An /spmv JSON body (parsed on a blocking thread).
pub fn json_request(q: &Query, bytes: Bytes, limits: &Limits) -> Result<SpmvRequest, ApiError> {
    let mut doc: SpmvJson =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Json(e.to_string()))?;
    drop(bytes);
    let o = Options {
        precision: doc.precision.as_deref().map(str::parse).transpose()?,
        verify: doc.verify,
        expected_calls: doc
            .expected_calls
            .as_ref()
            .map(expected_calls_json)
            .transpose()?,
    };
    let matrix = match doc.flat_csr()? {
        Some(c) => Some(c.into_csr(limits)?),
        None => doc.matrix.take().map(|m| m.into_csr(limits)).transpose()?,
    };
    assemble(q, matrix, doc.matrix_id, doc.x, o)
}
