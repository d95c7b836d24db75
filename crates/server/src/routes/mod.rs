//! The HTTP handlers, one module per resource: `matrices` (POST /matrices,
//! GET and DELETE /matrices/{id}), `spmv` (POST /spmv), `predict` (POST
//! /predict) and `ops` (health, readiness helpers, device, models, metrics,
//! OpenAPI, request tracking and the fallbacks); here the helpers they share.
//! Each handler carries its `#[utoipa::path]`: the document's operations come
//! from these annotations and the types of [`crate::api`].

pub mod matrices;
pub mod ops;
pub mod predict;
pub mod spmv;

pub use matrices::{delete_matrix, get_matrix, upload};
pub use ops::{device, healthz, metrics, models, no_route, openapi, track, wrong_method};
pub use predict::predict;
pub use spmv::spmv;

use crate::api::{self, MatrixSummary};
use crate::auth::Principal;
use crate::error::ApiError;
use crate::input::XIn;
use crate::input::{
    body_kind, parse_estimate, parse_matrix_body, read_body, spmv_estimate, wants_binary, y_binary,
    BodyKind, Precision, Query,
};
use crate::planner::{PlanView, Planned};
use crate::request::{read_spmv, Source};
use crate::state::{
    cast_checked, device_bytes, execute_blocking, upload_blocking, AppState, Executed, Ready,
    StoredMatrix, YVec,
};
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, MatchedPath, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use sparse::spmv::{compare, spmv_ref};
use sparse::{Csr, Scalar};
use std::sync::Arc;
use std::time::Instant;

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Runs CPU-bound request work off the async runtime.
pub(crate) async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("blocking task: {e}")))?
}

/// What every matrix handler (/predict, /matrices, /spmv) starts from: the
/// state, the caller, when the request reached the handler, its raw query,
/// headers and (unread) body.
pub struct Incoming {
    s: AppState,
    who: Principal,
    t0: Instant,
    raw_query: Option<String>,
    headers: HeaderMap,
    body: Body,
}

impl Incoming {
    /// The query, accepting only the parameters in `allowed` (else 400).
    fn query(&self, allowed: &[&str]) -> Result<Query, ApiError> {
        Query::parse(self.raw_query.as_deref(), allowed)
    }
}

impl FromRequest<AppState> for Incoming {
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, ApiError> {
        let t0 = Instant::now();
        let (parts, body) = req.into_parts();
        let who = parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| ApiError::internal("no caller: the auth layer did not run"))?;
        Ok(Incoming {
            s: s.clone(),
            who,
            t0,
            raw_query: parts.uri.query().map(str::to_string),
            headers: parts.headers,
            body,
        })
    }
}

/// Reads a matrix body (its bytes and their parse reserved in the memory budget)
/// and parses it: the stored form, the parse, feature and hash times, and the
/// reservation, which the caller holds until its answer is built.
async fn read_matrix(
    s: &AppState,
    who: &Principal,
    headers: &HeaderMap,
    body: Body,
) -> Result<(StoredMatrix, [f64; 3], crate::budget::Reservation), ApiError> {
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
fn stored_from(
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

#[allow(clippy::too_many_arguments)]
fn record(
    s: &AppState,
    who: &Principal,
    route: &str,
    m: &StoredMatrix,
    planned: &Planned,
    p: Precision,
    kernel_ms: Option<f64>,
    e2e_ms: f64,
    status: u16,
) -> store::RequestRecord {
    if who.contribute {
        s.keep_matrix(m);
    }
    store::RequestRecord {
        route: route.into(),
        matrix_hash: Some(m.id.clone()),
        features: m
            .features_if_computed()
            .map(store::FeatureVector::from_features),
        plan: Some(planned.plan.clone()),
        precision: Some(p),
        device: s.device().name().map(str::to_string),
        model: Some(planned.model.id.clone()),
        kernel_ms,
        e2e_ms: Some(e2e_ms),
        status,
    }
}
