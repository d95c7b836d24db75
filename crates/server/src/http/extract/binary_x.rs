//! An `application/octet-stream` /spmv body (binary x for `?matrix_id=`) into
//! a typed request: read whole, or on a device received chunk by chunk straight
//! into the buffer the upload reads (see [`crate::device::pool`]), checked finite.

use super::request::{Source, SpmvRequest};
use crate::device::vector::check_finite_le;
use crate::device::vector::XIn;
use crate::domain::config::Limits;
use crate::domain::error::ApiError;
use crate::http::input::{
    body_error, body_kind, content_encoding_is_gzip, declared_length, BodyKind, Precision, Query,
};
use crate::service::auth::Principal;
use crate::service::budget::Reservation;
use crate::service::state::AppState;
use axum::body::Body;
use axum::body::Bytes;
use axum::http::header;
use axum::http::HeaderMap;
use futures_util::StreamExt;

/// The error for a binary x of `bytes` bytes where `ncols` values of
/// `precision` were expected: 400 when `bytes` is not a whole number of
/// values, else 422 `x_length`; both name the expected and received sizes.
pub fn x_length_error(bytes: usize, ncols: usize, precision: Precision) -> ApiError {
    let w = precision.bytes();
    if !bytes.is_multiple_of(w) {
        return ApiError::BadRequest(format!(
            "binary x has {bytes} bytes, not a multiple of {w} (little-endian {precision} values); \
             the matrix has {ncols} columns: {} bytes expected",
            ncols * w
        ));
    }
    ApiError::XLength {
        expected: ncols,
        found: bytes / w,
    }
}

/// Receives the body into `out` (`ncols` values of `precision`, so
/// `ncols * precision.bytes()` bytes), checking each value finite as soon as
/// its last byte has arrived. A declared `Content-Length` of another size is
/// refused before anything is read; a body that turns out longer is read to
/// its end (within the body limit) only to count it, never stored.
pub async fn receive_x(
    body: Body,
    headers: &HeaderMap,
    limits: &Limits,
    precision: Precision,
    out: &mut [u8],
) -> Result<(), ApiError> {
    let (w, want, max) = (precision.bytes(), out.len(), limits.max_body_bytes);
    let ncols = want / w;
    if let Some(len) = declared_length(headers) {
        if len > max as u64 {
            return Err(ApiError::too_large("request body bytes", len, max));
        }
        if len != want as u64 {
            return Err(x_length_error(len as usize, ncols, precision));
        }
    }
    let mut stream = body.into_data_stream();
    let (mut got, mut checked) = (0usize, 0usize);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| body_error(&e, limits))?;
        let end = got + chunk.len();
        if end > max {
            return Err(ApiError::too_large("request body bytes", end, max));
        }
        if end > want {
            let mut total = end;
            while let Some(more) = stream.next().await {
                total += more.map_err(|e| body_error(&e, limits))?.len();
                if total > max {
                    return Err(ApiError::too_large("request body bytes", total, max));
                }
            }
            return Err(x_length_error(total, ncols, precision));
        }
        out[got..end].copy_from_slice(&chunk);
        got = end;
        let whole = got / w;
        check_finite_le(&out[checked * w..whole * w], precision, checked)?;
        checked = whole;
    }
    if got != want {
        return Err(x_length_error(got, ncols, precision));
    }
    Ok(())
}

/// An /spmv body of binary x for the uploaded matrix `?matrix_id=`; the
/// reservation grows to what converting x holds.
pub async fn binary_x_request(
    q: &Query,
    bytes: Bytes,
    res: &mut Reservation,
) -> Result<SpmvRequest, ApiError> {
    let Some(id) = q.matrix_id.clone() else {
        return Err(ApiError::BadRequest(
            "an application/octet-stream body is x as little-endian values and needs \
             ?matrix_id=<id> of a matrix uploaded with POST /matrices"
                .into(),
        ));
    };
    let p = q.precision.unwrap_or(Precision::DEFAULT);
    res.set_to(3 * bytes.len() as u64).await?;
    Ok(SpmvRequest {
        source: crate::http::extract::request::id_source(q, id),
        x: XIn::binary(bytes, p)?,
        precision: p,
        verify: q.verify.unwrap_or(false),
        expected_calls: q.expected_calls,
    })
}

/// The matrix id when the body is binary x for an uploaded matrix that can be
/// received straight into the buffer the device's upload reads: a device is
/// open, the body is not gzip, and y is not verified (which needs x on the
/// host as values).
pub fn streamable_x(
    s: &AppState,
    q: &Query,
    headers: &HeaderMap,
) -> Result<Option<String>, ApiError> {
    let binary = headers.get(header::CONTENT_TYPE).is_some()
        && matches!(body_kind(headers, b"")?, BodyKind::Binary);
    let ok = binary
        && s.device().available()
        && !q.verify.unwrap_or(false)
        && !content_encoding_is_gzip(headers)?;
    Ok(q.matrix_id.clone().filter(|_| ok))
}

/// Binary x for the uploaded matrix `id`: the matrix is looked up and put on
/// the device first (on its first use in this precision), then the body is
/// received chunk by chunk into a buffer of the matrix's x pool, each value
/// checked finite as it arrives ([`receive_x`]); the call
/// uploads x whole.
pub async fn stream_x_request(
    s: &AppState,
    who: &Principal,
    q: Query,
    headers: &HeaderMap,
    body: Body,
    id: String,
) -> Result<(SpmvRequest, Reservation), ApiError> {
    let p = q.precision.unwrap_or(Precision::DEFAULT);
    let found = if q.transpose == Some(true) {
        s.resolve_transposed(&id, who).await?
    } else {
        s.resolve(&id, who, true).await?
    };
    let Some(m) = found else {
        return Err(ApiError::NotFound(id));
    };
    let want = m.host.ncols() * p.bytes();
    let res = s.budget().reserve(want as u64).await?;
    let (ready, created) = s.ensure_ready(&m, p).await?;
    let mut x = ready.buffers.pools.x.take(want);
    receive_x(body, headers, s.limits(), p, x.as_mut()).await?;
    Ok((
        SpmvRequest {
            source: Source::Ready(m, created.then_some(ready.setup_ms)),
            x: XIn::received(x, p),
            precision: p,
            verify: false,
            expected_calls: q.expected_calls,
        },
        res,
    ))
}
