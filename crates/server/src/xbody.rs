//! Binary x for an uploaded matrix (`application/octet-stream` with
//! `?matrix_id=`), received chunk by chunk straight into the buffer the
//! device's upload reads (a reused one, see [`crate::pool`]), uploaded whole
//! once its last byte has arrived: receiving overlaps the copy into it and
//! the finite check, and no other host copy of x is made. Values split
//! across chunks are checked once whole.

use crate::config::Limits;
use crate::error::ApiError;
use crate::input::{body_error, check_finite_le, declared_length, Precision};
use axum::body::Body;
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
