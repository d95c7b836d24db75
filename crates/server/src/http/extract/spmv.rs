//! The /spmv body into a typed [`SpmvRequest`] in one step per content type:
//! the content type is read once and the body handed to its form's reader
//! (`json`, `csr`, `binary_x`, `multipart`), within the memory budget.

use super::binary_x::{binary_x_request, stream_x_request, streamable_x};
use super::csr::binary_csr_request;
use super::json::json_request;
use super::multipart::read_multipart;
pub use super::request::{Source, SpmvRequest};
use crate::domain::error::ApiError;
use crate::http::input::{body_kind, parse_estimate, read_body, BodyKind, Query};
use crate::service::auth::Principal;
use crate::service::blocking;
use crate::service::budget::Reservation;
use crate::service::state::AppState;
use axum::body::Body;
use axum::http::{header, HeaderMap};

/// Reads and parses an /spmv body, returning the request and the memory it
/// holds in the budget (kept until the answer is built).
pub async fn read_spmv(
    s: &AppState,
    who: &Principal,
    q: Query,
    headers: &HeaderMap,
    body: Body,
) -> Result<(SpmvRequest, Reservation), ApiError> {
    if let Some(id) = streamable_x(s, &q, headers)? {
        return stream_x_request(s, who, q, headers, body, id).await;
    }
    if let Some(BodyKind::Multipart(boundary)) = declared_multipart(headers)? {
        return read_multipart(s, q, headers, body, boundary).await;
    }
    let limits = *s.limits();
    let (bytes, mut res) = read_body(body, headers, &limits, s.budget()).await?;
    let kind = body_kind(headers, &bytes)?;
    let req = match kind {
        BodyKind::Json | BodyKind::BinaryCsr => {
            res.set_to(bytes.len() as u64 + parse_estimate(&kind, &bytes, &limits))
                .await?;
            blocking(move || match kind {
                BodyKind::Json => json_request(&q, bytes, &limits),
                _ => binary_csr_request(&q, &bytes, &limits),
            })
            .await?
        }
        BodyKind::Binary => binary_x_request(&q, bytes, &mut res).await?,
        BodyKind::Multipart(_) => unreachable!("multipart bodies are streamed above"),
        BodyKind::MatrixMarket => {
            return Err(ApiError::Unprocessable(
                "a plain Matrix Market body has no x: send JSON {\"matrix\": \"<Matrix Market>\", \"x\": [...]}, \
                 a multipart form with 'matrix' and 'x' parts, or upload with POST /matrices and send x by matrix_id"
                    .into(),
            ))
        }
    };
    Ok((req, res))
}

/// The multipart boundary, when the `Content-Type` says multipart.
fn declared_multipart(headers: &HeaderMap) -> Result<Option<BodyKind>, ApiError> {
    if headers.get(header::CONTENT_TYPE).is_none() {
        return Ok(None);
    }
    match body_kind(headers, b"")? {
        k @ BodyKind::Multipart(_) => Ok(Some(k)),
        _ => Ok(None),
    }
}
