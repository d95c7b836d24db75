//! Request bodies into validated values: Matrix Market text (optionally gzip),
//! JSON CSR, multipart forms, JSON /spmv bodies, little-endian binary x, query
//! strings, and the size limits every input is checked against before any large
//! allocation.
//!
//! Policy on values: matrices and x must hold finite numbers only; NaN and
//! infinities (including values that overflow `f32` when `f32` is asked for) are
//! rejected with 422.

use crate::config::Limits;
use crate::error::ApiError;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use serde::Deserialize;
use sparse::{Csr, Scalar};
use std::io::Read;
use std::str::FromStr;

/// The value type an operation runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Precision {
    /// Single precision.
    F32,
    /// Double precision.
    F64,
}

impl Precision {
    /// The precision used when a request names none.
    pub const DEFAULT: Precision = Precision::F64;

    /// `"f32"` or `"f64"`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => f32::NAME,
            Precision::F64 => f64::NAME,
        }
    }

    /// Bytes of one value.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
        }
    }
}

impl FromStr for Precision {
    type Err = ApiError;
    fn from_str(s: &str) -> Result<Self, ApiError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float" | "float32" | "single" => Ok(Precision::F32),
            "f64" | "double" | "float64" => Ok(Precision::F64),
            _ => Err(ApiError::Precision(s.to_string())),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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
}

const ACCEPTED: &str = "send text/plain (Matrix Market, optionally gzip), application/json, \
                        multipart/form-data or application/octet-stream";

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

/// Reads the whole body, refusing more than the limit (413), and removes gzip
/// compression (signalled by `Content-Encoding: gzip` or the gzip magic bytes).
pub async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limits: &Limits,
) -> Result<Bytes, ApiError> {
    let max = limits.max_body_bytes;
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
    {
        if len > max as u64 {
            return Err(ApiError::too_large("request body bytes", len, max));
        }
    }
    let bytes = axum::body::to_bytes(body, max).await.map_err(|e| {
        if error_chain_mentions(&e, "length limit") {
            ApiError::TooLarge {
                what: "request body bytes".into(),
                value: max as u64 + 1,
                limit: max as u64,
            }
        } else if error_chain_mentions(&e, "timeout") {
            ApiError::BodyTimeout(limits.body_timeout_s)
        } else {
            ApiError::BadRequest(format!("could not read the request body: {e}"))
        }
    })?;
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    match encoding.as_deref() {
        None | Some("identity") | Some("") => maybe_gunzip(bytes, max),
        Some("gzip") | Some("x-gzip") => {
            if !is_gzip(&bytes) {
                return Err(ApiError::BadRequest(
                    "Content-Encoding is gzip but the body does not start with the gzip magic bytes".into(),
                ));
            }
            maybe_gunzip(bytes, max)
        }
        Some(other) => Err(ApiError::MediaType {
            found: format!("Content-Encoding: {other}"),
            expected: "the only content encoding accepted is gzip".into(),
        }),
    }
}

fn error_chain_mentions(e: &dyn std::error::Error, needle: &str) -> bool {
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = cur {
        if err.to_string().to_ascii_lowercase().contains(needle) {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Whether bytes start with the gzip magic number.
pub fn is_gzip(b: &[u8]) -> bool {
    b.len() >= 2 && b[0] == 0x1f && b[1] == 0x8b
}

/// Decompresses gzip data (when it is gzip) without ever holding more than `max` bytes.
pub fn maybe_gunzip(bytes: Bytes, max: usize) -> Result<Bytes, ApiError> {
    if !is_gzip(&bytes) {
        return Ok(bytes);
    }
    let mut out = Vec::new();
    let mut dec = flate2::read::MultiGzDecoder::new(&bytes[..]).take(max as u64 + 1);
    dec.read_to_end(&mut out)
        .map_err(|e| ApiError::BadRequest(format!("the body is not valid gzip: {e}")))?;
    if out.len() > max {
        return Err(ApiError::too_large(
            "decompressed body bytes",
            out.len(),
            max,
        ));
    }
    Ok(Bytes::from(out))
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

/// Reads the size line of a Matrix Market file (without parsing the entries) and
/// checks it against the limits, so that a small body cannot make the parser
/// allocate for billions of entries. Malformed headers are left to the parser,
/// which reports them with their line numbers.
fn precheck_matrix_market(text: &[u8], limits: &Limits) -> Result<(), ApiError> {
    let mut lines = text.split(|&b| b == b'\n');
    let Some(banner) = lines.next() else {
        return Ok(());
    };
    let banner = String::from_utf8_lossy(banner).to_ascii_lowercase();
    let array = banner.contains(" array");
    for line in lines {
        let line = String::from_utf8_lossy(line);
        let t = line.trim();
        if t.is_empty() || t.starts_with('%') {
            continue;
        }
        let nums: Vec<u64> = match t.split_whitespace().map(|f| f.parse::<u64>()).collect() {
            Ok(v) => v,
            Err(_) => return Ok(()),
        };
        // Symmetric files store one triangle; the expanded count is checked
        // again after parsing.
        let (r, c, nnz) = match (array, nums.as_slice()) {
            (true, [r, c, ..]) => (*r, *c, r.saturating_mul(*c)),
            (false, [r, c, n, ..]) => (*r, *c, *n),
            _ => return Ok(()),
        };
        return check_dims(limits, r, c, nnz);
    }
    Ok(())
}

/// Parses Matrix Market bytes (plain or gzip) into a validated, finite matrix
/// within the limits.
pub fn parse_matrix_market(bytes: &[u8], limits: &Limits) -> Result<Csr<f64>, ApiError> {
    let plain = maybe_gunzip(Bytes::copy_from_slice(bytes), limits.max_body_bytes)?;
    precheck_matrix_market(&plain, limits)?;
    let a = sparse::mm::read_bytes::<f64>(&plain, &sparse::mm::ReadOptions::default())?;
    finish(a, limits)
}

fn finish(a: Csr<f64>, limits: &Limits) -> Result<Csr<f64>, ApiError> {
    check_dims(limits, a.nrows() as u64, a.ncols() as u64, a.nnz() as u64)?;
    a.check_finite()?;
    Ok(a)
}

/// A matrix in CSR form as JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsrJson {
    /// Number of rows.
    pub nrows: u64,
    /// Number of columns.
    pub ncols: u64,
    /// `nrows + 1` offsets into `col_idx`/`values`.
    pub row_ptr: Vec<u64>,
    /// Column index (0-based) of each entry.
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

/// Parses the body of /predict or /matrices: Matrix Market or JSON CSR.
pub fn parse_matrix_body(
    kind: &BodyKind,
    bytes: &[u8],
    limits: &Limits,
) -> Result<Csr<f64>, ApiError> {
    match kind {
        BodyKind::Json => parse_json_csr(bytes, limits),
        BodyKind::MatrixMarket | BodyKind::Binary => parse_matrix_market(bytes, limits),
        BodyKind::Multipart(_) => Err(ApiError::MediaType {
            found: "multipart/form-data".into(),
            expected: "this endpoint takes the matrix itself: text/plain (Matrix Market, optionally gzip) or application/json (CSR)".into(),
        }),
    }
}

/// Parses a matrix given as a JSON value: a string of Matrix Market text, or a CSR object.
pub fn parse_matrix_value(v: serde_json::Value, limits: &Limits) -> Result<Csr<f64>, ApiError> {
    match v {
        serde_json::Value::String(s) => parse_matrix_market(s.as_bytes(), limits),
        serde_json::Value::Object(_) => {
            let doc: CsrJson = serde_json::from_value(v)
                .map_err(|e| ApiError::Json(format!("field 'matrix': {e}")))?;
            doc.into_csr(limits)
        }
        other => Err(ApiError::Unprocessable(format!(
            "field 'matrix' must be Matrix Market text (a string) or a CSR object, not {}",
            json_kind(&other)
        ))),
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
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

/// Converts x to the working precision, checking its length and that every value
/// is finite in that precision.
pub fn x_in<T: Scalar>(x: &[f64], ncols: usize) -> Result<Vec<T>, ApiError> {
    if x.len() != ncols {
        return Err(ApiError::XLength {
            expected: ncols,
            found: x.len(),
        });
    }
    let mut out = Vec::with_capacity(x.len());
    for (i, &v) in x.iter().enumerate() {
        let t = T::from_f64(v);
        if !t.is_finite() {
            return Err(ApiError::NonFinite(format!(
                "x[{i}] = {v:?} is not finite in {}",
                T::NAME
            )));
        }
        out.push(t);
    }
    Ok(out)
}

/// Encodes y as little-endian bytes.
pub fn y_binary<T: Scalar>(y: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(y.len() * T::BYTES);
    for v in y {
        match T::BYTES {
            4 => out.extend_from_slice(&(v.to_f64() as f32).to_le_bytes()),
            _ => out.extend_from_slice(&v.to_f64().to_le_bytes()),
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_body_bytes: 1 << 20,
            max_rows: 1000,
            max_cols: 1000,
            max_nnz: 5000,
            body_timeout_s: 60,
        }
    }

    #[test]
    fn header_precheck_refuses_huge_declarations() {
        let mm = b"%%MatrixMarket matrix coordinate real general\n% c\n2000000000 3 1\n1 1 1\n";
        let e = precheck_matrix_market(mm, &limits()).unwrap_err();
        assert!(e.to_string().contains("rows is 2000000000"), "{e}");
        let mm = b"%%MatrixMarket matrix coordinate real general\n10 10 999999\n";
        let e = precheck_matrix_market(mm, &limits()).unwrap_err();
        assert!(e.to_string().contains("nnz"), "{e}");
        let ok = b"%%MatrixMarket matrix coordinate real general\n10 10 3\n";
        precheck_matrix_market(ok, &limits()).unwrap();
    }

    #[test]
    fn gzip_bomb_is_bounded() {
        use flate2::{write::GzEncoder, Compression};
        use std::io::Write;
        let mut enc = GzEncoder::new(Vec::new(), Compression::best());
        enc.write_all(&vec![b' '; 4 << 20]).unwrap();
        let gz = enc.finish().unwrap();
        let e = maybe_gunzip(Bytes::from(gz), 1 << 20).unwrap_err();
        assert_eq!(e.status().as_u16(), 413);
    }

    #[test]
    fn binary_x_round_trip_and_bad_length() {
        let y = [1.5f32, -2.0];
        let b = y_binary(&y);
        assert_eq!(parse_x_binary(&b, Precision::F32).unwrap(), vec![1.5, -2.0]);
        assert!(parse_x_binary(&b[..7], Precision::F32).is_err());
        let e = x_in::<f32>(&[1e300], 1).unwrap_err();
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
