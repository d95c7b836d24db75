//! A matrix body (Matrix Market, JSON CSR or binary CSR) into the stored form:
//! read within the memory budget, parsed off the runtime, its id and features.

use crate::domain::error::ApiError;
use crate::http::input::{body_kind, parse_estimate, parse_matrix_body, read_body, BodyKind};
use crate::service::auth::Principal;
use crate::service::blocking;
use crate::service::budget::Reservation;
use crate::service::state::{AppState, StoredMatrix};
use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use sparse::Csr;
use std::time::Instant;

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Reads a matrix body (its bytes and their parse reserved in the memory budget)
/// and parses it: the stored form, the parse, feature and hash times, and the
/// reservation, which the caller holds until its answer is built.
pub async fn read_matrix(
    s: &AppState,
    who: &Principal,
    headers: &HeaderMap,
    body: Body,
) -> Result<(StoredMatrix, [f64; 3], Reservation), ApiError> {
    let (bytes, mut held) = read_body(body, headers, s.limits(), s.budget()).await?;
    let kind = body_kind(headers, &bytes)?;
    held.set_to(bytes.len() as u64 + parse_estimate(&kind, &bytes, s.limits()))
        .await?;
    let (m, times) = parse_stored(s, who, kind, bytes).await?;
    Ok((m, times, held))
}

/// Parses a matrix body off the runtime; returns the stored form (id, host copy, features)
/// with the parse, feature and hash times.
async fn parse_stored(
    s: &AppState,
    who: &Principal,
    kind: BodyKind,
    bytes: Bytes,
) -> Result<(StoredMatrix, [f64; 3]), ApiError> {
    let limits = *s.limits();
    let (s, who) = (s.clone(), who.clone());
    blocking(move || {
        let t = Instant::now();
        let a = parse_matrix_body(&kind, &bytes, &limits)?;
        drop(bytes);
        let parse_ms = ms(t);
        stored_from(&s, &who, a, parse_ms, true)
    })
    .await
}

/// The stored form of a parsed matrix, with its features computed now when
/// `features` (uploads, /predict) or left for the planner to ask for
/// (inline /spmv: a quick plan needs none); with the feature and hash times.
pub fn stored_from(
    s: &AppState,
    who: &Principal,
    a: Csr<f64>,
    parse_ms: f64,
    features: bool,
) -> Result<(StoredMatrix, [f64; 3]), ApiError> {
    let t = Instant::now();
    let id = s.matrix_id(who, &a.content_hash());
    let hash_ms = ms(t);
    let m = StoredMatrix::lazy(id, who.owner().to_string(), a);
    let t = Instant::now();
    if features {
        m.features();
    }
    let features_ms = ms(t);
    Ok((m, [parse_ms, features_ms, hash_ms]))
}
