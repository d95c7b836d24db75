//! Request bodies into validated values: the body kind, reading a body within
//! the limits and the budget, Matrix Market (optionally gzip), JSON CSR, x and
//! the query. (x as the device takes it is `device::vector`'s.)

pub use crate::device::vector::{parse_x_binary, x_into, y_binary, XIn};
pub use crate::domain::config::check_dims;
use crate::domain::config::Limits;
use crate::domain::error::ApiError;
use crate::service::budget::{MemoryBudget, Reservation};
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use futures_util::StreamExt;
use serde::Deserialize;
use sparse::Csr;

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
    /// `application/vnd.spmv-select.csr`: the binary CSR format of [`crate::domain::csr_binary`].
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
        crate::domain::csr_binary::CONTENT_TYPE => Ok(BodyKind::BinaryCsr),
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
            crate::domain::csr_binary::Header::read(bytes, limits).map_or(0, |h| h.parse_estimate())
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
        BodyKind::BinaryCsr => match crate::domain::csr_binary::parse(bytes, limits)? {
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
    /// `transpose=true`: y = Aᵀ x (an uploaded matrix).
    pub transpose: Option<bool>,
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
                "transpose" => q.transpose = Some(parse_bool(k, v)?),
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

    /// Small limits for the parsers' unit tests.
    pub(crate) fn limits() -> Limits {
        Limits::small()
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
    fn query_parsing() {
        let q = Query::parse(Some("precision=f32&verify=true"), &["precision", "verify"]).unwrap();
        assert_eq!(q.precision, Some(Precision::F32));
        assert_eq!(q.verify, Some(true));
        assert!(Query::parse(Some("precison=f32"), &["precision"]).is_err());
        assert!(Query::parse(Some("precision=f16"), &["precision"]).is_err());
    }
}
