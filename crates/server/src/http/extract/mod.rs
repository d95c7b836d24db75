//! The handlers' shared prologue, said once as extractors: the caller, the
//! query checked against the route's parameters, and the body read into a typed
//! request (a matrix: [`MatrixCall`]; an /spmv request: [`SpmvCall`]).

pub mod binary_x;
pub mod csr;
pub mod json;
pub mod matrix;
pub mod multipart;
pub mod request;
pub mod spmv;

use crate::domain::error::ApiError;
use crate::http::input::{Precision, Query};
use crate::service::auth::Principal;
use crate::service::budget::Reservation;
use crate::service::planner::Planned;
use crate::service::state::{AppState, StoredMatrix};
use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::HeaderMap;
use request::SpmvRequest;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

/// The query parameters a route accepts (any other is a 400).
pub trait Params {
    /// Their names.
    const ALLOWED: &'static [&'static str];
}

/// `POST /predict`'s query.
pub struct PredictQuery;
impl Params for PredictQuery {
    const ALLOWED: &'static [&'static str] = &["explain", "precision", "expected_calls"];
}

/// `POST /matrices`' query.
pub struct UploadQuery;
impl Params for UploadQuery {
    const ALLOWED: &'static [&'static str] = &["precision", "expected_calls"];
}

/// The query of the JSON operations on an uploaded matrix (solve, spmm): none.
pub struct NoQuery;
impl Params for NoQuery {
    const ALLOWED: &'static [&'static str] = &[];
}

/// A JSON operation on an uploaded matrix (`POST /matrices/{id}/solve`,
/// `/spmm`): the caller, the matrix of the path (or its transpose when the
/// body asks; 404 unless it is this caller's), the body parsed as `T` (400
/// naming what is wrong), and the memory the body held in the budget while
/// it was read and parsed (kept until the answer is built).
pub struct UploadedCall<T> {
    /// The caller.
    pub caller: Caller,
    /// The matrix.
    pub m: Arc<StoredMatrix>,
    /// The parsed body.
    pub body: T,
    /// The body's reservation in the memory budget.
    pub held: Reservation,
}

impl<T> FromRequest<AppState> for UploadedCall<T>
where
    T: serde::de::DeserializeOwned + crate::http::api::OnUploaded + Send + 'static,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let axum::extract::Path(id) =
            axum::extract::Path::<String>::from_request_parts(&mut parts, s)
                .await
                .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let r = Incoming::<NoQuery>::from_request(Request::from_parts(parts, body), s).await?;
        let (bytes, mut held) =
            crate::http::input::read_body(r.body, &r.headers, s.limits(), s.budget()).await?;
        // Parsed JSON of numbers takes about as much again as its text.
        held.set_to(2 * bytes.len() as u64).await?;
        let body = crate::service::blocking(move || {
            serde_json::from_slice::<T>(&bytes).map_err(|e| ApiError::Json(e.to_string()))
        })
        .await?;
        let (c, transposed) = (&r.caller, body.transposed());
        let found = if transposed {
            c.s.resolve_transposed(&id, &c.who).await?
        } else {
            c.s.resolve(&id, &c.who, true).await?
        };
        let m = found.ok_or(ApiError::NotFound(id))?;
        Ok(UploadedCall {
            caller: r.caller,
            m,
            body,
            held,
        })
    }
}

/// `POST /spmv`'s query.
pub struct SpmvQuery;
impl Params for SpmvQuery {
    const ALLOWED: &'static [&'static str] = &[
        "precision",
        "verify",
        "matrix_id",
        "expected_calls",
        "transpose",
    ];
}

/// Who calls and since when: the state, the caller (from the auth layer) and
/// when the request reached the handler.
pub struct Caller {
    /// The service.
    pub s: AppState,
    /// The caller.
    pub who: Principal,
    /// When the request reached the handler.
    pub t0: Instant,
}

impl Caller {
    /// Milliseconds since the request reached the handler.
    pub fn ms(&self) -> f64 {
        self.t0.elapsed().as_secs_f64() * 1e3
    }

    /// Writes a served matrix request to the request log (and keeps the
    /// matrix for retraining when the caller contributes).
    #[allow(clippy::too_many_arguments)]
    pub fn log(
        &self,
        route: &str,
        m: &StoredMatrix,
        planned: &Planned,
        p: Precision,
        kernel_ms: Option<f64>,
        e2e_ms: f64,
        status: u16,
    ) {
        let (s, who) = (&self.s, &self.who);
        if who.contribute {
            s.keep_matrix(m);
        }
        s.log_request(store::RequestRecord {
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
        });
    }
}

/// What every matrix handler (/predict, /matrices, /spmv) starts from: the
/// caller, the query (only the parameters of `P`, else 400), the headers and
/// the (unread) body.
pub struct Incoming<P> {
    /// The caller.
    pub caller: Caller,
    /// The query.
    pub q: Query,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, unread.
    pub body: Body,
    params: PhantomData<fn() -> P>,
}

impl<P: Params> FromRequest<AppState> for Incoming<P> {
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, ApiError> {
        let t0 = Instant::now();
        let (parts, body) = req.into_parts();
        let who = parts
            .extensions
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| ApiError::internal("no caller: the auth layer did not run"))?;
        let q = Query::parse(parts.uri.query(), P::ALLOWED)?;
        Ok(Incoming {
            caller: Caller {
                s: s.clone(),
                who,
                t0,
            },
            q,
            headers: parts.headers,
            body,
            params: PhantomData,
        })
    }
}

/// A matrix request (`/predict`, `POST /matrices`) with its body parsed: the
/// stored form, the parse, feature and hash times, and the memory the body
/// holds in the budget (kept until the answer is built).
pub struct MatrixCall<P> {
    /// The caller.
    pub caller: Caller,
    /// The query.
    pub q: Query,
    /// The matrix.
    pub m: StoredMatrix,
    /// Parse, feature and hash times (ms).
    pub times: [f64; 3],
    /// The body's reservation in the memory budget.
    pub held: Reservation,
    params: PhantomData<fn() -> P>,
}

impl<P: Params> FromRequest<AppState> for MatrixCall<P> {
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, ApiError> {
        let r = Incoming::<P>::from_request(req, s).await?;
        let c = &r.caller;
        let (m, times, held) = matrix::read_matrix(&c.s, &c.who, &r.headers, r.body).await?;
        Ok(MatrixCall {
            caller: r.caller,
            q: r.q,
            m,
            times,
            held,
            params: PhantomData,
        })
    }
}

/// An /spmv request with its body read into the typed request, in one step per
/// content type ([`spmv::read_spmv`]), and the memory it holds in the budget.
pub struct SpmvCall {
    /// The caller.
    pub caller: Caller,
    /// The headers (the answer's form follows `Accept`).
    pub headers: HeaderMap,
    /// The typed request.
    pub req: SpmvRequest,
    /// Its reservation in the memory budget (kept until the answer is built).
    pub held: Reservation,
}

impl FromRequest<AppState> for SpmvCall {
    type Rejection = ApiError;

    async fn from_request(req: Request, s: &AppState) -> Result<Self, ApiError> {
        let r = Incoming::<SpmvQuery>::from_request(req, s).await?;
        let c = &r.caller;
        let (req, held) = spmv::read_spmv(&c.s, &c.who, r.q, &r.headers, r.body).await?;
        Ok(SpmvCall {
            caller: r.caller,
            headers: r.headers,
            req,
            held,
        })
    }
}
