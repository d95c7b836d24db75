//! Binary x for an uploaded matrix (`application/octet-stream` with
//! `?matrix_id=`), received chunk by chunk straight into the buffer the
//! device's upload reads: the matrix's [`XInflow`] (where x is streamed,
//! `--stream-x`) when no other request holds it, whose completed slices go
//! to the device while the rest still arrives, else a reused host buffer (see [`crate::pool`]) uploaded once
//! whole. Receiving overlaps the copy and the finite check, and no other
//! host copy of x is made. Values split across chunks are checked once whole.

use crate::config::Limits;
use crate::error::ApiError;
use crate::input::{body_error, check_finite_le, declared_length, Precision};
use crate::state::Ready;
use axum::body::Body;
use axum::http::HeaderMap;
use engine::XInflow;
use futures_util::StreamExt;
use std::sync::Arc;

/// Where a binary x is received: bytes appended in order, readable back.
pub trait XSink {
    /// Bytes x has (what the matrix expects).
    fn capacity(&self) -> usize;
    /// Appends `chunk` after the bytes received so far (the caller has
    /// checked that it fits).
    fn put(&mut self, chunk: &[u8]) -> Result<(), ApiError>;
    /// The bytes received so far.
    fn received(&self) -> &[u8];
}

/// A plain buffer, filled from its start.
pub struct SliceSink<'a> {
    out: &'a mut [u8],
    got: usize,
}

impl<'a> SliceSink<'a> {
    /// An empty sink over `out` (which x fills exactly).
    pub fn new(out: &'a mut [u8]) -> SliceSink<'a> {
        SliceSink { out, got: 0 }
    }
}

impl XSink for SliceSink<'_> {
    fn capacity(&self) -> usize {
        self.out.len()
    }
    fn put(&mut self, chunk: &[u8]) -> Result<(), ApiError> {
        let end = self.got + chunk.len();
        self.out[self.got..end].copy_from_slice(chunk);
        self.got = end;
        Ok(())
    }
    fn received(&self) -> &[u8] {
        &self.out[..self.got]
    }
}

/// A matrix's [`XInflow`] taken by one request, given back to its
/// [`Ready`] (ready for the next x) when dropped.
pub struct InflowLease {
    inflow: Option<XInflow>,
    home: Arc<Ready>,
}

impl std::fmt::Debug for InflowLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InflowLease")
            .field("filled", &self.inflow().filled())
            .finish()
    }
}

impl InflowLease {
    /// The matrix's inflow, when no other request holds it.
    pub fn take(home: &Arc<Ready>) -> Option<InflowLease> {
        let inflow = home
            .buffers
            .inflow
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        Some(InflowLease {
            inflow: Some(inflow),
            home: home.clone(),
        })
    }

    /// The inflow.
    pub fn inflow(&self) -> &XInflow {
        self.inflow.as_ref().expect("held until dropped")
    }

    /// The inflow, to fill or run.
    pub fn inflow_mut(&mut self) -> &mut XInflow {
        self.inflow.as_mut().expect("held until dropped")
    }

    /// Whether it belongs to `buffers` (the same upload on the same engine).
    pub fn belongs_to(&self, buffers: &crate::state::DeviceBuffers) -> bool {
        std::ptr::eq(&self.home.buffers, buffers)
    }
}

impl Drop for InflowLease {
    fn drop(&mut self) {
        if let Some(mut inflow) = self.inflow.take() {
            // (A failed wait leaves it out: a fault drops the buffers anyway.)
            if inflow.restart().is_ok() {
                *self
                    .home
                    .buffers
                    .inflow
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(inflow);
            }
        }
    }
}

impl XSink for InflowLease {
    fn capacity(&self) -> usize {
        self.inflow().len()
    }
    fn put(&mut self, chunk: &[u8]) -> Result<(), ApiError> {
        Ok(self.inflow_mut().put(chunk)?)
    }
    fn received(&self) -> &[u8] {
        self.inflow().received()
    }
}

/// Binary x received into its matrix's [`XInflow`] (its earlier slices
/// already uploaded), its length matching the matrix and every value
/// checked finite on arrival. The lease is taken by the call that runs it.
#[derive(Debug, Clone)]
pub struct InflowX {
    /// The inflow holding x, until a call takes it.
    pub lease: Arc<std::sync::Mutex<Option<InflowLease>>>,
    /// The width of each value.
    pub precision: Precision,
    /// The number of values.
    pub len: usize,
}

impl InflowX {
    /// x received into `lease`.
    pub fn new(lease: InflowLease, precision: Precision) -> InflowX {
        let len = lease.capacity() / precision.bytes();
        InflowX {
            lease: Arc::new(std::sync::Mutex::new(Some(lease))),
            precision,
            len,
        }
    }

    /// Runs `f` on x's bytes while a call has not taken them; else `None`.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let held = self.lease.lock().unwrap_or_else(|e| e.into_inner());
        held.as_ref().map(|l| f(l.received()))
    }

    /// Takes the lease (for the call that runs x).
    pub fn take(&self) -> Option<InflowLease> {
        self.lease.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Gives a lease taken but not used back.
    pub fn give_back(&self, lease: InflowLease) {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = Some(lease);
    }
}

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
/// `ncols * precision.bytes()` bytes of capacity), checking each value
/// finite as soon as its last byte has arrived. A declared `Content-Length` of another size is
/// refused before anything is read; a body that turns out longer is read to
/// its end (within the body limit) only to count it, never stored.
pub async fn receive_x(
    body: Body,
    headers: &HeaderMap,
    limits: &Limits,
    precision: Precision,
    out: &mut impl XSink,
) -> Result<(), ApiError> {
    let (w, want, max) = (precision.bytes(), out.capacity(), limits.max_body_bytes);
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
        out.put(&chunk)?;
        got = end;
        let whole = got / w;
        check_finite_le(&out.received()[checked * w..whole * w], precision, checked)?;
        checked = whole;
    }
    if got != want {
        return Err(x_length_error(got, ncols, precision));
    }
    Ok(())
}
