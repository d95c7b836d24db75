//! A `multipart/form-data` /spmv body into a typed request: parts streamed,
//! checked by name and size (and reserved) as they arrive, each decoded (one
//! gzip layer) and parsed off the runtime once whole.

use super::request::{assemble, Options, SpmvRequest};
use crate::domain::config::Limits;
use crate::domain::csr_binary;
use crate::domain::error::ApiError;
use crate::http::input::{
    content_encoding_is_gzip, gunzip_reserved, parse_estimate, parse_expected_calls,
    parse_matrix_body, parse_x_json, BodyKind, Query,
};
use crate::service::blocking;
use crate::service::budget::Reservation;
use crate::service::state::AppState;
use axum::body::{Body, Bytes};
use axum::http::HeaderMap;

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
pub async fn read_multipart(
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
                } else if ct.contains(csr_binary::CONTENT_TYPE) {
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
                o.expected_calls = Some(parse_expected_calls("part", &text(&name, &data)?)?)
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
