//! Request bodies into validated values: Matrix Market text (optionally gzip),
//! JSON CSR, multipart forms, JSON /spmv bodies, little-endian binary x, query
//! strings, and the size limits every input is checked against before any large
//! allocation.
//!
//! Policy on values: matrices and x must hold finite numbers only; NaN and
//! infinities (including values that overflow `f32` when `f32` is asked for) are
//! rejected with 422.

use crate::budget::{MemoryBudget, Reservation};
use crate::config::Limits;
use crate::error::ApiError;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use futures_util::StreamExt;
use serde::Deserialize;
use sparse::{Csr, Scalar};

/// The value type an operation runs in (the workspace's one type).
pub use sparse::Precision;

/// What kind of payload a body holds, from its `Content-Type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyKind {
    /// Matrix Market text (or gzip of it).
    MatrixMarket,
    /// A JSON document.
    Json,
    /// `multipart/form-data` with the given boundary.
    Multipart(String),
    /// `application/octet-stream`: Matrix Market for matrix endpoints, binary x for /spmv by id.
    Binary,
    /// `application/vnd.spmv-select.csr`: the binary CSR format of [`crate::csr_binary`].
    BinaryCsr,
}

const ACCEPTED: &str = "send text/plain (Matrix Market, optionally gzip), application/json, \
                        application/vnd.spmv-select.csr (binary CSR), multipart/form-data or \
                        application/octet-stream";

/// Classifies a body by its `Content-Type` (sniffing JSON when there is none).
pub fn body_kind(headers: &HeaderMap, body: &[u8]) -> Result<BodyKind, ApiError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        let first = body.iter().find(|b| !b.is_ascii_whitespace());
        return Ok(if first == Some(&b'{') {
            BodyKind::Json
        } else {
            BodyKind::MatrixMarket
        });
    };
    let ct = ct.to_str().map_err(|_| ApiError::MediaType {
        found: "<not ASCII>".into(),
        expected: ACCEPTED.into(),
    })?;
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => Ok(BodyKind::Json),
        e if e.ends_with("+json") => Ok(BodyKind::Json),
        "multipart/form-data" => {
            let boundary = multer::parse_boundary(ct).map_err(|e| {
                ApiError::BadRequest(format!(
                    "multipart/form-data without a usable boundary: {e}"
                ))
            })?;
            Ok(BodyKind::Multipart(boundary))
        }
        "application/octet-stream" => Ok(BodyKind::Binary),
        crate::csr_binary::CONTENT_TYPE => Ok(BodyKind::BinaryCsr),
        // curl --data-binary sends application/x-www-form-urlencoded unless told
        // otherwise; such a body is taken as Matrix Market text.
        "text/plain"
        | "text/x-matrix-market"
        | "application/x-matrix-market"
        | "application/gzip"
        | "application/x-www-form-urlencoded"
        | "application/x-gzip"
        | "" => Ok(BodyKind::MatrixMarket),
        _ => Err(ApiError::MediaType {
            found: ct.to_string(),
            expected: ACCEPTED.into(),
        }),
    }
}

/// Reads the whole body, refusing more than the limit (413), reserving memory
/// for it in the budget as it arrives, and removes one layer of gzip
/// (signalled by `Content-Encoding: gzip` or the gzip magic bytes).
pub async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limits: &Limits,
    budget: &MemoryBudget,
) -> Result<(Bytes, Reservation), ApiError> {
    let gzip_encoded = content_encoding_is_gzip(headers)?;
    let max = limits.max_body_bytes;
    let declared = declared_length(headers);
    if let Some(len) = declared {
        if len > max as u64 {
            return Err(ApiError::too_large("request body bytes", len, max));
        }
    }
    // Reserve what the body says it holds (or a first step when it does not
    // say), then more as chunks arrive. A body that says its length also
    // reserves a first guess of its parse (2x for text, 8x for JSON, see
    // `parse_estimate`), so that when the budget is spent the answer is a quick
    // 503 rather than one after receiving the whole body; the guess is
    // replaced by the estimate from the declared sizes once they are read.
    let first = match declared {
        Some(len) => len.saturating_mul(1 + guess_factor(headers)),
        None => STEP.min(max as u64),
    };
    let mut res = budget.reserve(first).await?;
    let mut buf = Vec::with_capacity(declared.unwrap_or(0) as usize);
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| body_error(&e, limits))?;
        let len = buf.len() + chunk.len();
        if len > max {
            return Err(ApiError::too_large("request body bytes", len, max));
        }
        if len as u64 > res.bytes() {
            res.grow_to((len as u64).max(2 * res.bytes()).min(max as u64))
                .await?;
        }
        buf.extend_from_slice(&chunk);
    }
    let bytes = Bytes::from(buf);
    if gzip_encoded && !is_gzip(&bytes) {
        return Err(ApiError::BadRequest(
            "Content-Encoding is gzip but the body does not start with the gzip magic bytes".into(),
        ));
    }
    let bytes = gunzip_reserved(bytes, limits, &mut res).await?;
    Ok((bytes, res))
}

/// The body's length as its `Content-Length` declares it, if it does.
pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// A failure to read the body: 408 past the body deadline, else 400.
pub(crate) fn body_error(e: &axum::Error, limits: &Limits) -> ApiError {
    if body_timed_out(e) {
        ApiError::BodyTimeout(limits.body_timeout_s)
    } else {
        ApiError::BadRequest(format!("could not read the request body: {e}"))
    }
}

/// How many times its length a body's parse is first guessed to hold.
fn guess_factor(headers: &HeaderMap) -> u64 {
    match body_kind(headers, b"") {
        Ok(BodyKind::Json) => 8,
        Ok(BodyKind::Multipart(_)) => 0,
        _ => 2,
    }
}

/// Bytes reserved at a time for bodies of unknown length.
const STEP: u64 = 1 << 20;

/// Whether `Content-Encoding` says gzip; any encoding other than gzip or
/// identity is refused (415).
pub fn content_encoding_is_gzip(headers: &HeaderMap) -> Result<bool, ApiError> {
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    match encoding.as_deref() {
        None | Some("identity") | Some("") => Ok(false),
        Some("gzip") | Some("x-gzip") => Ok(true),
        Some(other) => Err(ApiError::MediaType {
            found: format!("Content-Encoding: {other}"),
            expected: "the only content encoding accepted is gzip".into(),
        }),
    }
}

/// Whether bytes start with the gzip magic number.
pub fn is_gzip(b: &[u8]) -> bool {
    b.len() >= 2 && b[0] == 0x1f && b[1] == 0x8b
}

/// Removes one layer of gzip (when it is gzip), off the runtime, never
/// decoding more than the reservation holds: it starts at 8 times the
/// compressed size (Matrix Market compresses 3-6x) and grows 4x at a time up
/// to `max_decompressed_bytes`, decoding again each time. Past the limit the
/// answer is 413, gzip inside gzip 415.
pub async fn gunzip_reserved(
    bytes: Bytes,
    limits: &Limits,
    res: &mut Reservation,
) -> Result<Bytes, ApiError> {
    if !is_gzip(&bytes) {
        return Ok(bytes);
    }
    let max = limits.max_decompressed_bytes as u64;
    let base = res.bytes();
    let mut room = (bytes.len() as u64).saturating_mul(8).max(STEP).min(max);
    loop {
        res.grow_to(base + room).await?;
        let (b2, cap) = (bytes.clone(), room as usize);
        let out = tokio::task::spawn_blocking(move || sparse::mm::gunzip_limited(&b2, cap))
            .await
            .map_err(|e| ApiError::internal(format!("gzip task: {e}")))?;
        match out {
            Ok(text) => return Ok(Bytes::from(text)),
            Err(sparse::SparseError::Parse {
                kind: sparse::error::ParseErrorKind::TooLarge,
                ..
            }) if room < max => room = room.saturating_mul(4).min(max),
            Err(sparse::SparseError::Parse {
                kind: sparse::error::ParseErrorKind::TooLarge,
                ..
            }) => return Err(ApiError::too_large("decompressed body bytes", max + 1, max)),
            Err(sparse::SparseError::Parse {
                kind: sparse::error::ParseErrorKind::NestedGzip,
                ..
            }) => return Err(ApiError::NestedGzip),
            Err(e) => {
                return Err(ApiError::BadRequest(format!(
                    "the body is not valid gzip: {e}"
                )))
            }
        }
    }
}

/// Checks dimensions against the limits.
pub fn check_dims(limits: &Limits, nrows: u64, ncols: u64, nnz: u64) -> Result<(), ApiError> {
    if nrows > limits.max_rows as u64 {
        return Err(ApiError::too_large("rows", nrows, limits.max_rows));
    }
    if ncols > limits.max_cols as u64 {
        return Err(ApiError::too_large("cols", ncols, limits.max_cols));
    }
    if nnz > limits.max_nnz as u64 {
        return Err(ApiError::too_large("nnz", nnz, limits.max_nnz));
    }
    Ok(())
}

/// Bytes parsing a matrix body of this kind is estimated to hold beyond the
/// body itself: for Matrix Market, from the sizes its header declares (the
/// same header parser as the reader, so a header it refuses costs nothing
/// here: the parse reports it); for JSON, from the body's length (each number
/// takes at least 2 bytes of text and becomes up to 8 bytes, twice).
pub fn parse_estimate(kind: &BodyKind, bytes: &[u8], limits: &Limits) -> u64 {
    match kind {
        BodyKind::Json => 8 * bytes.len() as u64,
        BodyKind::Multipart(_) => 0,
        BodyKind::BinaryCsr => {
            crate::csr_binary::Header::read(bytes, limits).map_or(0, |h| h.parse_estimate())
        }
        BodyKind::MatrixMarket | BodyKind::Binary => {
            let opts = sparse::mm::ReadOptions::default();
            match sparse::mm::read_header(bytes, &opts, &limits.mm()) {
                Ok(d) => mm_estimate(&d),
                Err(_) => 0,
            }
        }
    }
}

/// Parse and CSR bytes of a declared Matrix Market matrix: 16 bytes per
/// parsed entry, 24 per stored entry (arrays and the sort's copy), and for each
/// row the row pointers, counters and features.
fn mm_estimate(d: &sparse::mm::Declared) -> u64 {
    let e = d.entries as u64;
    let nnz = if d.mirrored { 2 * e } else { e };
    16 * e + 24 * nnz + 24 * (d.nrows as u64 + 1) + 8 * d.ncols as u64
}

/// Bytes the result of an SpMV holds for a matrix of this shape: x and y in
/// both precisions, and y as JSON text (at most 25 bytes per value) or as
/// little-endian binary (8).
pub fn spmv_estimate(nrows: usize, ncols: usize, binary_y: bool) -> u64 {
    let per_row = if binary_y { 24 } else { 41 };
    per_row * nrows as u64 + 16 * ncols as u64
}

/// Parses Matrix Market bytes (plain, or one layer of gzip) into a validated,
/// finite matrix within the limits; the header's sizes are checked before
/// anything is allocated for them.
pub fn parse_matrix_market(bytes: &[u8], limits: &Limits) -> Result<Csr<f64>, ApiError> {
    let opts = sparse::mm::ReadOptions::default();
    let a = sparse::mm::read_bytes_with::<f64>(bytes, &opts, &limits.mm())?;
    finish(a, limits)
}

fn finish(a: Csr<f64>, limits: &Limits) -> Result<Csr<f64>, ApiError> {
    check_dims(limits, a.nrows() as u64, a.ncols() as u64, a.nnz() as u64)?;
    a.check_finite()?;
    Ok(a)
}

/// A matrix in CSR form as JSON.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = Csr)]
#[serde(deny_unknown_fields)]
pub struct CsrJson {
    /// Number of rows.
    pub nrows: u64,
    /// Number of columns.
    pub ncols: u64,
    /// `nrows + 1` offsets into `col_idx`/`values`: starting at 0, non-decreasing, ending at nnz.
    pub row_ptr: Vec<u64>,
    /// Column index (0-based) of each entry; unsorted rows are sorted and duplicates summed.
    pub col_idx: Vec<u64>,
    /// Value of each entry.
    pub values: Vec<f64>,
}

impl CsrJson {
    /// Validates the arrays into a matrix within the limits.
    pub fn into_csr(self, limits: &Limits) -> Result<Csr<f64>, ApiError> {
        check_dims(limits, self.nrows, self.ncols, self.col_idx.len() as u64)?;
        let to_u32 = |name: &str, v: Vec<u64>| -> Result<Vec<u32>, ApiError> {
            v.into_iter()
                .enumerate()
                .map(|(i, x)| {
                    u32::try_from(x).map_err(|_| {
                        ApiError::Unprocessable(format!(
                            "invalid matrix: {name}[{i}] = {x} does not fit 32-bit indices"
                        ))
                    })
                })
                .collect()
        };
        let row_ptr = to_u32("row_ptr", self.row_ptr)?;
        let col_idx = to_u32("col_idx", self.col_idx)?;
        let a = Csr::try_new(
            self.nrows as usize,
            self.ncols as usize,
            row_ptr,
            col_idx,
            self.values,
        )?;
        finish(a, limits)
    }
}

/// Parses a JSON CSR document.
pub fn parse_json_csr(bytes: &[u8], limits: &Limits) -> Result<Csr<f64>, ApiError> {
    let doc: CsrJson = serde_json::from_slice(bytes).map_err(|e| ApiError::Json(e.to_string()))?;
    doc.into_csr(limits)
}

/// Parses the body of /predict or /matrices: Matrix Market, JSON CSR or binary
/// CSR (without an x section).
pub fn parse_matrix_body(
    kind: &BodyKind,
    bytes: &[u8],
    limits: &Limits,
) -> Result<Csr<f64>, ApiError> {
    match kind {
        BodyKind::Json => parse_json_csr(bytes, limits),
        BodyKind::MatrixMarket | BodyKind::Binary => parse_matrix_market(bytes, limits),
        BodyKind::BinaryCsr => match crate::csr_binary::parse(bytes, limits)? {
            (a, None) => Ok(a),
            (_, Some(_)) => Err(ApiError::BinaryCsr(
                "the header says an x section follows (flag bit 0), but this endpoint takes a \
                 matrix only; x belongs to POST /spmv"
                    .into(),
            )),
        },
        BodyKind::Multipart(_) => Err(ApiError::MediaType {
            found: "multipart/form-data".into(),
            expected: "this endpoint takes the matrix itself: text/plain (Matrix Market, optionally gzip), application/json (CSR) or application/vnd.spmv-select.csr (binary CSR)".into(),
        }),
    }
}

/// The `matrix` field of a JSON /spmv body, deserialised straight into its
/// typed form (no intermediate `serde_json::Value`): Matrix Market text (a
/// string) or a CSR object.
#[derive(Debug)]
pub enum MatrixField {
    /// Matrix Market text.
    Text(String),
    /// CSR arrays.
    Csr(CsrJson),
}

impl<'de> Deserialize<'de> for MatrixField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = MatrixField;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("Matrix Market text (a string) or a CSR object")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MatrixField, E> {
                Ok(MatrixField::Text(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<MatrixField, E> {
                Ok(MatrixField::Text(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                m: A,
            ) -> Result<MatrixField, A::Error> {
                CsrJson::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(MatrixField::Csr)
            }
        }
        d.deserialize_any(V)
    }
}

impl MatrixField {
    /// Validates the field into a matrix within the limits.
    pub fn into_csr(self, limits: &Limits) -> Result<Csr<f64>, ApiError> {
        match self {
            MatrixField::Text(s) => parse_matrix_market(s.as_bytes(), limits),
            MatrixField::Csr(c) => c.into_csr(limits),
        }
    }
}

/// Parses x given as a JSON array of numbers.
pub fn parse_x_json(bytes: &[u8]) -> Result<Vec<f64>, ApiError> {
    serde_json::from_slice::<Vec<f64>>(bytes)
        .map_err(|e| ApiError::Json(format!("x must be a JSON array of numbers: {e}")))
}

/// Parses x given as little-endian binary values of the precision's width.
pub fn parse_x_binary(bytes: &[u8], precision: Precision) -> Result<Vec<f64>, ApiError> {
    let w = precision.bytes();
    if !bytes.chunks_exact(w).remainder().is_empty() {
        return Err(ApiError::BadRequest(format!(
            "binary x has {} bytes, not a multiple of {w} (little-endian {precision} values)",
            bytes.len()
        )));
    }
    Ok(match precision {
        Precision::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect(),
        Precision::F64 => bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("chunk of 8")))
            .collect(),
    })
}

/// x as a request carried it: values (JSON, multipart, binary CSR's trailing
/// x), or the little-endian bytes of an `application/octet-stream` body, kept as
/// they came (for an uploaded matrix on a device, received straight into a
/// reused buffer: [`crate::xbody`]) and handed to the device as they are, or
/// converted once, on the device worker, straight into the pinned staging
/// buffer (the request path makes no other copy of them).
#[derive(Debug, Clone)]
pub enum XIn {
    /// Values.
    Values(Vec<f64>),
    /// Little-endian values of `precision`, their count checked (a whole number).
    Binary {
        /// The body.
        bytes: axum::body::Bytes,
        /// The width of each value.
        precision: Precision,
        /// Whether every value was already checked finite as it arrived
        /// ([`crate::xbody::receive_x`]), so [`XIn::check_finite`] has nothing to do.
        checked: bool,
        /// Whether the bytes lie in pinned host memory (received into a
        /// pinned buffer of the matrix's x pool).
        pinned: bool,
        /// The shared memory the bytes are (received into a shared buffer
        /// of the matrix's x pool), for the kernels to read in place.
        shared: Option<engine::SharedView>,
    },
}

impl XIn {
    /// Binary x: checks that the bytes hold a whole number of values.
    pub fn binary(bytes: axum::body::Bytes, precision: Precision) -> Result<XIn, ApiError> {
        let w = precision.bytes();
        if !bytes.len().is_multiple_of(w) {
            return Err(ApiError::BadRequest(format!(
                "binary x has {} bytes, not a multiple of {w} (little-endian {precision} values)",
                bytes.len()
            )));
        }
        Ok(XIn::Binary {
            bytes,
            precision,
            checked: false,
            pinned: false,
            shared: None,
        })
    }

    /// Binary x received by [`crate::xbody::receive_x`]: its length matches
    /// the matrix and every value was checked finite on arrival.
    pub fn received(x: crate::pool::Pooled, precision: Precision) -> XIn {
        XIn::Binary {
            pinned: x.is_pinned(),
            shared: x.shared_view(),
            bytes: x.into_bytes(),
            precision,
            checked: true,
        }
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        match self {
            XIn::Values(v) => v.len(),
            XIn::Binary {
                bytes, precision, ..
            } => bytes.len() / precision.bytes(),
        }
    }

    /// Whether x is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as `f64` (for the reference SpMV of `verify`).
    pub fn to_values(&self) -> Vec<f64> {
        match self {
            XIn::Values(v) => v.clone(),
            XIn::Binary {
                bytes, precision, ..
            } => parse_x_binary(bytes, *precision).unwrap_or_default(),
        }
    }

    /// The bytes of a binary x of `T`'s width as they came, unchecked: a
    /// little-endian device takes them as they are
    /// ([`engine::Engine::execute_le`]) while [`XIn::check_finite`] runs.
    /// `None` for x given as values or in another width.
    pub fn le_bytes_of_width(&self, width: usize) -> Option<engine::LeBytes<'_>> {
        match self {
            XIn::Binary {
                bytes,
                precision,
                pinned,
                shared,
                ..
            } if precision.bytes() == width => Some(engine::LeBytes {
                bytes,
                pinned: *pinned,
                shared: shared.as_ref(),
            }),
            _ => None,
        }
    }

    /// Checks that every value of a binary x is finite, in one pass over the
    /// body's bytes with no copy (x given as values is checked as it is
    /// converted, by [`XIn::fill`]).
    pub fn check_finite(&self) -> Result<(), ApiError> {
        match self {
            XIn::Binary {
                bytes,
                precision,
                checked: false,
                ..
            } => check_finite_le(bytes, *precision, 0),
            _ => Ok(()),
        }
    }

    /// Converts x into `out` (`out.len()` values), checking the length and that
    /// every value is finite in `T`.
    pub fn fill<T: Scalar>(&self, out: &mut [T]) -> Result<(), ApiError> {
        if self.len() != out.len() {
            return Err(ApiError::XLength {
                expected: out.len(),
                found: self.len(),
            });
        }
        match self {
            XIn::Values(v) => x_into(v, out),
            XIn::Binary {
                bytes, precision, ..
            } => fill_le(bytes, *precision, out),
        }
    }
}

/// Converts little-endian values of `precision` into `out` (as many), each
/// checked finite in `T`.
fn fill_le<T: Scalar>(bytes: &[u8], precision: Precision, out: &mut [T]) -> Result<(), ApiError> {
    match precision {
        Precision::F32 => fill_values(
            bytes
                .as_chunks::<4>()
                .0
                .iter()
                .map(|c| f32::from_le_bytes(*c) as f64),
            out,
        ),
        Precision::F64 => fill_values(
            bytes
                .as_chunks::<8>()
                .0
                .iter()
                .map(|c| f64::from_le_bytes(*c)),
            out,
        ),
    }
}

/// Checks that every little-endian value of `precision` in `bytes` (a whole
/// number of them) is finite; the first that is not is named by its index,
/// counted from `first` (the index of the first value in `bytes`).
pub(crate) fn check_finite_le(
    bytes: &[u8],
    precision: Precision,
    first: usize,
) -> Result<(), ApiError> {
    match precision {
        Precision::F32 => check_le(bytes.as_chunks::<4>().0, |c| f32::from_le_bytes(c) as f64),
        Precision::F64 => check_le(bytes.as_chunks::<8>().0, f64::from_le_bytes),
    }
    .map_err(|(i, v)| {
        let i = first + i;
        ApiError::NonFinite(format!("x[{i}] = {v:?} is not finite in {precision}"))
    })
}

/// Writes `values` converted to `T` into `out`, refusing the first one that is
/// not finite in `T` (the caller has checked the count). The conversion and
/// the check are separate branch-free passes, so both vectorise: on the
/// request path this is one pass over x at about memory speed.
fn fill_values<T: Scalar>(
    values: impl Iterator<Item = f64> + Clone,
    out: &mut [T],
) -> Result<(), ApiError> {
    for (v, o) in values.clone().zip(out.iter_mut()) {
        *o = T::from_f64(v);
    }
    if all_finite(out) {
        return Ok(());
    }
    let i = out
        .iter()
        .position(|v| !v.is_finite())
        .expect("a value is not finite");
    let v = values.clone().nth(i).unwrap_or(f64::NAN);
    Err(ApiError::NonFinite(format!(
        "x[{i}] = {v:?} is not finite in {}",
        T::NAME
    )))
}

/// Checks that every little-endian value is finite; else the index and value
/// of the first that is not. Blocks of a few thousand values are folded
/// without early exit (vector code), and only a failing block is searched.
fn check_le<const W: usize>(
    values: &[[u8; W]],
    decode: impl Fn([u8; W]) -> f64,
) -> Result<(), (usize, f64)> {
    const BLOCK: usize = 4096;
    for (b, block) in values.chunks(BLOCK).enumerate() {
        if block.iter().fold(true, |ok, c| ok & decode(*c).is_finite()) {
            continue;
        }
        for (i, c) in block.iter().enumerate() {
            let v = decode(*c);
            if !v.is_finite() {
                return Err((b * BLOCK + i, v));
            }
        }
    }
    Ok(())
}

/// Whether every value is finite: a fold without early exit, which the
/// compiler turns into vector code.
fn all_finite<T: Scalar>(v: &[T]) -> bool {
    v.iter().fold(true, |ok, x| ok & x.is_finite())
}

/// Converts x into `out` (the device's pinned staging buffer on the request
/// path), checking its length and that every value is finite in `T`.
pub fn x_into<T: Scalar>(x: &[f64], out: &mut [T]) -> Result<(), ApiError> {
    if x.len() != out.len() {
        return Err(ApiError::XLength {
            expected: out.len(),
            found: x.len(),
        });
    }
    fill_values(x.iter().copied(), out)
}

/// Encodes y as little-endian bytes.
pub fn y_binary<T: Scalar>(y: &[T]) -> Vec<u8> {
    let mut out = vec![0u8; y.len() * T::BYTES];
    y_binary_into(y, &mut out);
    out
}

/// Writes y as little-endian bytes into `out` (`y.len() * T::BYTES` bytes).
/// Each width is one fixed-size store per value, which compiles to a copy.
pub fn y_binary_into<T: Scalar>(y: &[T], out: &mut [u8]) {
    match T::BYTES {
        4 => {
            for (o, v) in out.as_chunks_mut::<4>().0.iter_mut().zip(y) {
                *o = (v.to_f64() as f32).to_le_bytes();
            }
        }
        _ => {
            for (o, v) in out.as_chunks_mut::<8>().0.iter_mut().zip(y) {
                *o = v.to_f64().to_le_bytes();
            }
        }
    }
}

/// The query parameters the endpoints understand.
#[derive(Debug, Default, Clone)]
pub struct Query {
    /// `precision=f32|f64`.
    pub precision: Option<Precision>,
    /// `verify=true`.
    pub verify: Option<bool>,
    /// `explain=true`.
    pub explain: Option<bool>,
    /// `matrix_id=<id>`.
    pub matrix_id: Option<String>,
    /// `expected_calls=<n>`, n >= 1.
    pub expected_calls: Option<u64>,
}

/// How often the client expects to multiply by the matrix: an integer >= 1
/// given as text (a query parameter or a multipart part), else 400.
pub fn parse_expected_calls(where_: &str, v: &str) -> Result<u64, ApiError> {
    match v.trim().parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(expected_calls_error(where_, v)),
    }
}

/// The same for a JSON value: an integer >= 1, else 400.
pub fn expected_calls_json(v: &serde_json::Value) -> Result<u64, ApiError> {
    match v.as_u64() {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(expected_calls_error("field", &v.to_string())),
    }
}

fn expected_calls_error(where_: &str, v: &str) -> ApiError {
    ApiError::BadRequest(format!(
        "{where_} 'expected_calls' must be an integer >= 1 (how often the matrix will be \
         multiplied), not '{v}'"
    ))
}

fn parse_bool(key: &str, v: &str) -> Result<bool, ApiError> {
    match v.to_ascii_lowercase().as_str() {
        "" | "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(ApiError::BadRequest(format!(
            "query parameter '{key}' must be true or false, not '{v}'"
        ))),
    }
}

impl Query {
    /// Parses a query string, accepting only the keys in `allowed`.
    pub fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<Query, ApiError> {
        let mut q = Query::default();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if !allowed.contains(&k) {
                return Err(ApiError::BadRequest(format!(
                    "unknown query parameter '{k}'; this endpoint accepts: {}",
                    allowed.join(", ")
                )));
            }
            match k {
                "precision" => q.precision = Some(v.parse()?),
                "verify" => q.verify = Some(parse_bool(k, v)?),
                "explain" => q.explain = Some(parse_bool(k, v)?),
                "matrix_id" => q.matrix_id = Some(v.to_string()),
                "expected_calls" => {
                    q.expected_calls = Some(parse_expected_calls("query parameter", v)?)
                }
                _ => unreachable!("allowed keys are handled above"),
            }
        }
        Ok(q)
    }
}

/// Whether the client asked for a binary y (`Accept: application/octet-stream`).
pub fn wants_binary(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.to_ascii_lowercase().contains("application/octet-stream"))
        .unwrap_or(false)
}

/// Whether a body read failed because the body deadline passed (the error of
/// tower-http's body timeout, anywhere in the chain).
fn body_timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Small limits for the parsers' unit tests (here and in `csr_binary`).
    pub(crate) fn limits() -> Limits {
        Limits {
            max_body_bytes: 1 << 20,
            max_decompressed_bytes: 1 << 20,
            max_rows: 1000,
            max_cols: 1000,
            max_nnz: 5000,
            body_timeout_s: 60,
        }
    }

    #[test]
    fn huge_declarations_are_refused_on_the_size_line() {
        let mm = b"%%MatrixMarket matrix coordinate real general\n% c\n2000000000 3 1\n1 1 1\n";
        let e = parse_matrix_market(mm, &limits()).unwrap_err();
        assert!(e.to_string().contains("rows = 2000000000"), "{e}");
        let mm = b"%%MatrixMarket\tmatrix coordinate\treal general\r\n10\t10  999999\r\n";
        let e = parse_matrix_market(mm, &limits()).unwrap_err();
        assert!(e.to_string().contains("nnz = 999999"), "{e}");
        assert_eq!(e.status().as_u16(), 413);
    }

    #[test]
    fn json_matrix_field_is_text_or_csr() {
        let f: MatrixField = serde_json::from_str("\"%%MatrixMarket\"").unwrap();
        assert!(matches!(f, MatrixField::Text(_)));
        let f: MatrixField = serde_json::from_str(
            r#"{"nrows":1,"ncols":1,"row_ptr":[0,1],"col_idx":[0],"values":[2.0]}"#,
        )
        .unwrap();
        assert_eq!(f.into_csr(&limits()).unwrap().nnz(), 1);
        let e = serde_json::from_str::<MatrixField>("[1]").unwrap_err();
        assert!(e.to_string().contains("Matrix Market text"), "{e}");
    }

    #[test]
    fn binary_x_fills_the_staging_buffer_checking_length_and_finiteness() {
        let b = axum::body::Bytes::from(y_binary(&[1.5f64, -2.0, 3.0]));
        let x = XIn::binary(b.clone(), Precision::F64).unwrap();
        assert_eq!(x.len(), 3);
        let mut out = [0f32; 3];
        x.fill(&mut out).unwrap();
        assert_eq!(out, [1.5, -2.0, 3.0]);
        assert_eq!(x.to_values(), vec![1.5, -2.0, 3.0]);
        let e = x.fill(&mut [0f64; 2]).unwrap_err();
        assert!(
            matches!(
                e,
                ApiError::XLength {
                    expected: 2,
                    found: 3
                }
            ),
            "{e}"
        );
        assert!(XIn::binary(b.slice(..7), Precision::F64).is_err());
        let big = XIn::binary(
            axum::body::Bytes::from(y_binary(&[1e300f64])),
            Precision::F64,
        )
        .unwrap();
        let e = big.fill(&mut [0f32; 1]).unwrap_err();
        assert!(e.to_string().contains("not finite in f32"), "{e}");
        let f32x = XIn::binary(
            axum::body::Bytes::from(y_binary(&[0.25f32])),
            Precision::F32,
        )
        .unwrap();
        let mut o = [0f64; 1];
        f32x.fill(&mut o).unwrap();
        assert_eq!(o, [0.25]);
    }

    #[test]
    fn binary_x_round_trip_and_bad_length() {
        let y = [1.5f32, -2.0];
        let b = y_binary(&y);
        assert_eq!(parse_x_binary(&b, Precision::F32).unwrap(), vec![1.5, -2.0]);
        assert!(parse_x_binary(&b[..7], Precision::F32).is_err());
        let e = x_into::<f32>(&[1e300], &mut [0f32; 1]).unwrap_err();
        assert!(e.to_string().contains("not finite in f32"), "{e}");
    }

    #[test]
    fn query_parsing() {
        let q = Query::parse(Some("precision=f32&verify=true"), &["precision", "verify"]).unwrap();
        assert_eq!(q.precision, Some(Precision::F32));
        assert_eq!(q.verify, Some(true));
        assert!(Query::parse(Some("precison=f32"), &["precision"]).is_err());
        assert!(Query::parse(Some("precision=f16"), &["precision"]).is_err());
    }
}
