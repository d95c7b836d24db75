//! The /spmv request body in its four forms (JSON, binary CSR with x, binary x
//! for an uploaded matrix, multipart), read within the memory budget: JSON is deserialised
//! straight into typed fields; multipart parts are streamed, checked by name
//! and size as they arrive, and decoded (one gzip layer) only once whole.

use crate::auth::Principal;
use crate::budget::Reservation;
use crate::config::Limits;
use crate::error::ApiError;
use crate::input::XIn;
use crate::input::{
    body_kind, content_encoding_is_gzip, gunzip_reserved, parse_estimate, parse_matrix_body,
    parse_x_json, read_body, BodyKind, CsrJson, MatrixField, Precision, Query,
};
use crate::state::{AppState, StoredMatrix};
use crate::xbody::receive_x;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use serde::Deserialize;
use sparse::Csr;
use std::sync::Arc;

use crate::routes::blocking;

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

/// Where the matrix of an /spmv request comes from.
pub enum Source {
    /// Given in the request (boxed: a matrix carries its row and column
    /// facts inline, a few hundred bytes beside the other variants).
    Inline(Box<Csr<f64>>),
    /// Uploaded before with POST /matrices.
    Id(String),
    /// Uploaded, already looked up and on the device before x was received
    /// ([`crate::xbody`]); with its set-up time when this request uploaded it.
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
struct Options {
    precision: Option<Precision>,
    verify: Option<bool>,
    expected_calls: Option<u64>,
}

fn assemble(
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
        (None, Some(id)) => Source::Id(id),
        (None, None) => {
            return Err(ApiError::Unprocessable(
                "no matrix: give 'matrix' (Matrix Market text or CSR object) or 'matrix_id' (from POST /matrices)".into(),
            ))
        }
    };
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

/// An /spmv JSON body (parsed on a blocking thread).
fn json_request(q: &Query, bytes: Bytes, limits: &Limits) -> Result<SpmvRequest, ApiError> {
    let mut doc: SpmvJson =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::Json(e.to_string()))?;
    drop(bytes);
    let o = Options {
        precision: doc.precision.as_deref().map(str::parse).transpose()?,
        verify: doc.verify,
        expected_calls: doc
            .expected_calls
            .as_ref()
            .map(crate::input::expected_calls_json)
            .transpose()?,
    };
    let matrix = match doc.flat_csr()? {
        Some(c) => Some(c.into_csr(limits)?),
        None => doc.matrix.take().map(|m| m.into_csr(limits)).transpose()?,
    };
    assemble(q, matrix, doc.matrix_id, doc.x, o)
}

/// An /spmv binary CSR body, which must carry x (parsed on a blocking thread).
fn binary_csr_request(q: &Query, bytes: &[u8], limits: &Limits) -> Result<SpmvRequest, ApiError> {
    let (a, x) = crate::csr_binary::parse(bytes, limits)?;
    let x = x.ok_or_else(|| {
        ApiError::Unprocessable(
            "no x: an inline binary CSR body for /spmv carries x after the values \
             (set flag bit 0 of the header and append ncols values)"
                .into(),
        )
    })?;
    assemble(q, Some(a), None, Some(x), Options::default())
}

/// An /spmv body of binary x for the uploaded matrix `?matrix_id=`; the
/// reservation grows to what converting x holds.
async fn binary_x_request(
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
        source: Source::Id(id),
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
fn streamable_x(s: &AppState, q: &Query, headers: &HeaderMap) -> Result<Option<String>, ApiError> {
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
/// checked finite as it arrives ([`crate::xbody::receive_x`]); the call
/// uploads x whole.
async fn stream_x_request(
    s: &AppState,
    who: &Principal,
    q: Query,
    headers: &HeaderMap,
    body: Body,
    id: String,
) -> Result<(SpmvRequest, Reservation), ApiError> {
    let p = q.precision.unwrap_or(Precision::DEFAULT);
    let Some(m) = s.resolve(&id, who, true).await? else {
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

/// The parts an /spmv form may have, and the largest size of the small ones.
const PARTS: [&str; 6] = [
    "matrix",
    "x",
    "precision",
    "verify",
    "matrix_id",
    "expected_calls",
];
const SMALL_PART: u64 = 256;

fn multipart_error(e: multer::Error, max: usize) -> ApiError {
    match e {
        multer::Error::UnknownField { field_name } => ApiError::BadRequest(format!(
            "unknown multipart part '{}'; expected {}",
            field_name.unwrap_or_default(),
            PARTS.join(", ")
        )),
        multer::Error::FieldSizeExceeded { limit, field_name } => ApiError::too_large(
            format!("multipart part '{}' bytes", field_name.unwrap_or_default()),
            limit + 1,
            limit,
        ),
        multer::Error::StreamSizeExceeded { .. } => {
            ApiError::too_large("request body bytes", max as u64 + 1, max)
        }
        other => ApiError::BadRequest(format!("malformed multipart body: {other}")),
    }
}

/// Streams a multipart /spmv form: unknown parts are refused when their header
/// arrives, each part's size is checked (and reserved) chunk by chunk.
async fn read_multipart(
    s: &AppState,
    q: Query,
    headers: &HeaderMap,
    body: Body,
    boundary: String,
) -> Result<(SpmvRequest, Reservation), ApiError> {
    if content_encoding_is_gzip(headers)? {
        return Err(ApiError::MediaType {
            found: "Content-Encoding: gzip on multipart/form-data".into(),
            expected: "send the form uncompressed; a matrix part may itself be gzip".into(),
        });
    }
    let limits = *s.limits();
    let max = limits.max_body_bytes;
    let mut res = s.budget().reserve(1 << 20).await?;
    let mut sizes = multer::SizeLimit::new().whole_stream(max as u64);
    for small in &PARTS[2..] {
        sizes = sizes.for_field(*small, SMALL_PART);
    }
    let constraints = multer::Constraints::new()
        .allowed_fields(PARTS.to_vec())
        .size_limit(sizes);
    let mut mp =
        multer::Multipart::with_constraints(body.into_data_stream(), boundary, constraints);
    let mut parts: Vec<(String, Option<String>, Bytes)> = Vec::new();
    let mut held = 0u64;
    while let Some(mut field) = mp.next_field().await.map_err(|e| multipart_error(e, max))? {
        let name = field
            .name()
            .map(str::to_string)
            .ok_or_else(|| ApiError::BadRequest("a multipart part has no name".into()))?;
        let ct = field.content_type().map(|m| m.to_string());
        let mut data = Vec::new();
        while let Some(chunk) = field.chunk().await.map_err(|e| multipart_error(e, max))? {
            held += chunk.len() as u64;
            if held > res.bytes() {
                res.grow_to(held.max(2 * res.bytes()).min(max as u64))
                    .await?;
            }
            data.extend_from_slice(&chunk);
        }
        parts.push((name, ct, Bytes::from(data)));
    }
    let req = parse_parts(parts, q, &limits, &mut res).await?;
    Ok((req, res))
}

/// Parses the parts of a form, each off the runtime, reserving what parsing holds.
async fn parse_parts(
    parts: Vec<(String, Option<String>, Bytes)>,
    q: Query,
    limits: &Limits,
    res: &mut Reservation,
) -> Result<SpmvRequest, ApiError> {
    let limits = *limits;
    let mut matrix = None;
    let (mut x, mut matrix_id) = (None, None);
    let mut o = Options::default();
    for (name, ct, data) in parts {
        match name.as_str() {
            "matrix" => {
                let ct = ct.as_deref().unwrap_or("");
                let kind = if ct.contains("json") {
                    BodyKind::Json
                } else if ct.contains(crate::csr_binary::CONTENT_TYPE) {
                    BodyKind::BinaryCsr
                } else {
                    BodyKind::MatrixMarket
                };
                let data = gunzip_reserved(data, &limits, res).await?;
                res.grow_by(parse_estimate(&kind, &data, &limits)).await?;
                matrix = Some(blocking(move || parse_matrix_body(&kind, &data, &limits)).await?);
            }
            "x" => {
                res.grow_by(8 * data.len() as u64).await?;
                x = Some(blocking(move || parse_x_json(&data)).await?);
            }
            "precision" => o.precision = Some(text(&name, &data)?.parse()?),
            "verify" => o.verify = Some(part_bool(&text(&name, &data)?)?),
            "expected_calls" => {
                o.expected_calls = Some(crate::input::parse_expected_calls(
                    "part",
                    &text(&name, &data)?,
                )?)
            }
            "matrix_id" => matrix_id = Some(text(&name, &data)?.trim().to_string()),
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown multipart part '{other}'; expected {}",
                    PARTS.join(", ")
                )))
            }
        }
    }
    assemble(&q, matrix, matrix_id, x, o)
}

fn part_bool(v: &str) -> Result<bool, ApiError> {
    match v.trim() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(ApiError::BadRequest(format!(
            "part 'verify' must be true or false, not '{other}'"
        ))),
    }
}

fn text(name: &str, data: &[u8]) -> Result<String, ApiError> {
    String::from_utf8(data.to_vec())
        .map_err(|_| ApiError::BadRequest(format!("part '{name}' is not UTF-8 text")))
}
