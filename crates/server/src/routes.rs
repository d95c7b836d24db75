//! The HTTP handlers: /predict, /matrices, /spmv, and the informational routes.

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
use axum::extract::{MatchedPath, Path, RawQuery, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};
use sparse::spmv::{compare, spmv_ref};
use sparse::{Csr, Features, Scalar};
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

fn matrix_json(m: &StoredMatrix) -> Value {
    json!({
        "id": m.id,
        "nrows": m.host.nrows(),
        "ncols": m.host.ncols(),
        "nnz": m.host.nnz(),
    })
}

fn features_json(f: &Features) -> Value {
    Value::Object(f.named().map(|(n, v)| (n.to_string(), json!(v))).collect())
}

/// Counts every routed request in the metrics, logs it, and records failed
/// matrix requests in the results database (successful ones are recorded by
/// their handlers, with features and plan).
pub async fn track(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().to_string();
    let t0 = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    let secs = t0.elapsed().as_secs_f64();
    s.metrics().request(&route, &method, status, secs);
    tracing::debug!(%method, %route, status, ms = secs * 1e3, "request");
    if status >= 400 && matches!(route.as_str(), "/predict" | "/matrices" | "/spmv") {
        s.log_request(store::RequestRecord {
            route,
            matrix_hash: None,
            features: None,
            plan: None,
            precision: None,
            device: s.device().name().map(str::to_string),
            model: None,
            kernel_ms: None,
            e2e_ms: Some(secs * 1e3),
            status,
        });
    }
    resp
}

/// A JSON 404 for unknown routes.
pub async fn no_route(req: Request) -> ApiError {
    ApiError::NoRoute(format!("{} {}", req.method(), req.uri().path()))
}

/// A JSON 405 for known routes with another method.
pub async fn wrong_method(req: Request) -> ApiError {
    ApiError::MethodNotAllowed(format!("{} {}", req.method(), req.uri().path()))
}

/// `GET /healthz`.
pub async fn healthz(State(s): State<AppState>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "device": s.device().available(),
        "uptime_s": s.uptime_s(),
    }))
}

/// `GET /device`.
pub async fn device(State(s): State<AppState>) -> Json<Value> {
    let d = s.device();
    let (state, reason) = s.device_slot().state();
    Json(match d.info() {
        Some(i) => json!({
            "available": true,
            "name": i.name,
            "vendor": i.vendor,
            "platform": i.platform,
            "kind": i.kind,
            "driver": i.driver,
            "version": i.version,
            "compute_units": i.compute_units,
            "global_mem_bytes": i.global_mem_bytes,
            "max_alloc_bytes": i.max_alloc_bytes,
            "local_mem_bytes": i.local_mem_bytes,
            "max_work_group_size": i.max_work_group_size,
            "fp64": i.fp64,
            "state": state,
            "state_reason": reason,
            "generation": s.device_slot().generation(),
            "copy_bandwidth": d.copy.as_ref().map(|c| json!({
                "gbps": c.gbps, "bytes": c.bytes, "median_ms": c.median_ms,
            })),
        }),
        None => json!({
            "available": false,
            "reason": d.unavailable,
        }),
    })
}

/// `GET /models`.
pub async fn models(State(s): State<AppState>) -> Json<Value> {
    let p = s.planner();
    Json(json!({
        "folder": p.folder(),
        "found": p.found(),
        "device": p.device(),
        "in_use": {
            "f32": p.used(Precision::F32),
            "f64": p.used(Precision::F64),
        },
        "files": p.files(),
    }))
}

/// `GET /metrics`.
pub async fn metrics(State(s): State<AppState>) -> Response {
    let text = s.metrics().render(s.gauges());
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        )],
        text,
    )
        .into_response()
}

/// `GET /openapi.json`.
pub async fn openapi() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        crate::openapi::DOCUMENT,
    )
        .into_response()
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
        stored_from(&s, &who, a, parse_ms)
    })
    .await
}

fn stored_from(
    s: &AppState,
    who: &Principal,
    a: Csr<f64>,
    parse_ms: f64,
) -> Result<(StoredMatrix, [f64; 3]), ApiError> {
    let t = Instant::now();
    let features = Features::of(&a);
    let features_ms = ms(t);
    let t = Instant::now();
    let id = s.matrix_id(who, &a.content_hash());
    let hash_ms = ms(t);
    Ok((
        StoredMatrix::new(id, who.owner().to_string(), a, features),
        [parse_ms, features_ms, hash_ms],
    ))
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
        features: Some(store::FeatureVector::from_features(&m.features)),
        plan: Some(planned.plan.clone()),
        precision: Some(p),
        device: s.device().name().map(str::to_string),
        model: Some(planned.model.id.clone()),
        kernel_ms,
        e2e_ms: Some(e2e_ms),
        status,
    }
}

/// `POST /predict[?explain=true][&precision=f32|f64]`.
pub async fn predict(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let q = Query::parse(q.as_deref(), &["explain", "precision"])?;
    let p = q.precision.unwrap_or(Precision::DEFAULT);
    let explain = q.explain.unwrap_or(false);
    let (bytes, mut held) = read_body(body, &headers, s.limits(), s.budget()).await?;
    let kind = body_kind(&headers, &bytes)?;
    held.set_to(bytes.len() as u64 + parse_estimate(&kind, &bytes, s.limits()))
        .await?;
    let (m, [parse_ms, features_ms, hash_ms]) = parse_stored(&s, &who, kind, bytes).await?;
    let s2 = s.clone();
    let (m, planned, predicted, predict_ms) = blocking(move || {
        let t = Instant::now();
        let planned = s2.plan(&m, p, explain);
        let predicted = s2
            .planner()
            .predict_time(p, &m.features, &planned.plan, &planned.binning);
        Ok((m, planned, predicted, ms(t)))
    })
    .await?;
    let total_ms = ms(t0);
    let mut body = json!({
        "matrix": matrix_json(&m),
        "precision": p.name(),
        "features": features_json(&m.features),
        "plan": PlanView::of(&planned.plan, &planned.binning),
        "model": planned.model,
        "predicted_ms": predicted,
        "timings_ms": {
            "parse": parse_ms,
            "features": features_ms,
            "hash": hash_ms,
            "predict": predict_ms,
            "total": total_ms,
        },
    });
    if let Some(e) = &planned.explanation {
        body["explanation"] = serde_json::to_value(e).map_err(ApiError::internal)?;
    }
    s.log_request(record(
        &s, &who, "/predict", &m, &planned, p, None, total_ms, 200,
    ));
    Ok(Json(body).into_response())
}

fn ready_json(r: &Ready) -> Value {
    json!({
        "precision": r.precision.name(),
        "plan": PlanView::of(&r.planned.plan, &r.planned.binning),
        "model": r.planned.model,
        "device_bytes": r.device_bytes,
        "setup_ms": r.setup_ms,
    })
}

/// `POST /matrices[?precision=f32|f64]`: parse, plan, upload once.
pub async fn upload(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let q = Query::parse(q.as_deref(), &["precision"])?;
    let p = q.precision.unwrap_or(Precision::DEFAULT);
    let (bytes, mut held) = read_body(body, &headers, s.limits(), s.budget()).await?;
    let kind = body_kind(&headers, &bytes)?;
    held.set_to(bytes.len() as u64 + parse_estimate(&kind, &bytes, s.limits()))
        .await?;
    let (m, [parse_ms, features_ms, hash_ms]) = parse_stored(&s, &who, kind, bytes).await?;
    // Refuse early, before any device work, what can never fit the cache.
    let need = m.host_bytes() + device_bytes(&m.host, p);
    let cap = s.config().cache_bytes as u64;
    if need > cap {
        return Err(ApiError::too_large(
            "matrix bytes (host copy plus device buffers)",
            need,
            cap,
        ));
    }
    // Also refuse, before caching, a matrix the device cannot hold or a precision it lacks.
    s.check_device_fit(&m.host, p)?;
    let m = blocking(move || {
        if p == Precision::F32 {
            cast_checked::<f32>(&m.host)?;
        }
        Ok(m)
    })
    .await?;
    let (m, existed) = s.insert(m)?;
    let (ready, created) = if s.device().available() {
        match s.ensure_ready(&m, p).await {
            Ok((r, c)) => (Some(r), c),
            Err(e) => {
                // A matrix that cannot be put on the device is not kept.
                if !existed {
                    s.remove_any(&m.id);
                }
                return Err(e);
            }
        }
    } else {
        (None, false)
    };
    let total_ms = ms(t0);
    let planned = match &ready {
        Some(r) => r.planned.clone(),
        None => {
            let (s2, m2) = (s.clone(), m.clone());
            blocking(move || Ok(s2.plan(&m2, p, false))).await?
        }
    };
    let body = json!({
        "id": m.id,
        "matrix": matrix_json(&m),
        "precision": p.name(),
        "plan": PlanView::of(&planned.plan, &planned.binning),
        "model": planned.model,
        "tuning": planned.tuning,
        "already_uploaded": existed && !created,
        "on_device": ready.is_some(),
        "device": s.device().name(),
        "bytes": {
            "host": m.host_bytes(),
            "device": ready.as_ref().map_or(0, |r| r.device_bytes),
        },
        "timings_ms": {
            "parse": parse_ms,
            "features": features_ms,
            "hash": hash_ms,
            "setup": ready.as_ref().filter(|_| created).map(|r| r.setup_ms),
            "total": total_ms,
        },
    });
    s.log_request(record(
        &s,
        &who,
        "/matrices",
        &m,
        &planned,
        p,
        None,
        total_ms,
        201,
    ));
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/matrices/{}", m.id)) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

/// `GET /matrices/{id}`.
pub async fn get_matrix(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let (m, bytes) = s
        .peek(&id, &who)
        .ok_or_else(|| ApiError::NotFound(id.clone()))?;
    let ready: Vec<Value> = m.all_ready().iter().map(|r| ready_json(r)).collect();
    Ok(Json(json!({
        "id": m.id,
        "matrix": matrix_json(&m),
        "features": features_json(&m.features),
        "bytes": { "host": m.host_bytes(), "total": bytes },
        "uploaded": ready,
    })))
}

/// `DELETE /matrices/{id}`.
pub async fn delete_matrix(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if s.remove(&id, &who) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(id))
    }
}

/// Refuses (422, naming the first bad row) a y that JSON cannot carry: an
/// overflow to infinity or a NaN (from infinity times zero) would come out as
/// `null`. Binary y carries such values as they are.
fn check_json_y(y: &YVec) -> Result<(), ApiError> {
    fn first<T: Scalar>(y: &[T]) -> Option<(usize, f64)> {
        y.iter()
            .position(|v| !v.is_finite())
            .map(|i| (i, y[i].to_f64()))
    }
    let bad = match y {
        YVec::F32(y) => first(y),
        YVec::F64(y) => first(y),
        YVec::Bytes(_) => None,
    };
    match bad {
        Some((row, v)) => Err(ApiError::NonFiniteResult {
            row,
            value: format!("{v:?}"),
        }),
        None => Ok(()),
    }
}

/// How y compares with the reference SpMV.
fn verify_y(a: &Csr<f64>, x: &[f64], y: &YVec) -> Result<Value, ApiError> {
    fn typed<T: Scalar>(a: &Csr<f64>, x: &[f64], y: &[T]) -> Result<Value, ApiError> {
        let at = a.cast::<T>();
        let xt: Vec<T> = x.iter().map(|&v| T::from_f64(v)).collect();
        let r = spmv_ref(&at, &xt)?;
        let c = compare(&at, &xt, y, &r);
        Ok(json!({
            "ok": c.ok(),
            "max_rel_err": c.max_rel_err,
            "worst_bound_ratio": c.worst_bound_ratio,
            "worst_row": c.worst_row,
            "reference": "sparse::spmv::spmv_ref",
        }))
    }
    match y {
        YVec::F32(y) => typed::<f32>(a, x, y),
        YVec::F64(y) => typed::<f64>(a, x, y),
        YVec::Bytes(_) => Err(ApiError::internal("y was encoded before verification")),
    }
}

/// y = A x for an uploaded matrix, uploading it first when it is not on the
/// device (first use, or its buffers were dropped by a device fault). When
/// the engine is rebuilt between the upload and the run, it is uploaded to the
/// new engine and run once more. Returns the plan, the result and the set-up
/// time when this call uploaded it.
async fn execute_cached(
    s: &AppState,
    m: &Arc<StoredMatrix>,
    p: Precision,
    x: &Arc<XIn>,
    bytes_y: bool,
) -> Result<(Planned, Executed, Option<f64>), ApiError> {
    let mut retried = false;
    loop {
        let (ready, created) = s.ensure_ready(m, p).await?;
        let (r2, x2) = (ready.clone(), x.clone());
        let run = s
            .on_device_at(Some(ready.generation), move |e, _| {
                execute_blocking(e, &r2.buffers, &x2, bytes_y)
            })
            .await;
        match run {
            Ok(exec) => {
                return Ok((
                    ready.planned.clone(),
                    exec,
                    created.then_some(ready.setup_ms),
                ))
            }
            Err(ApiError::Recovering { .. }) if !retried && s.device_slot().is_up() => {
                retried = true;
            }
            Err(e) => return Err(e),
        }
    }
}

/// `POST /spmv`: y = A x on the device.
pub async fn spmv(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let q = Query::parse(q.as_deref(), &["precision", "verify", "matrix_id"])?;
    let (req, mut held) = read_spmv(&s, q, &headers, body).await?;
    let read_ms = ms(t0);
    let p = req.precision;
    let x = Arc::new(req.x);
    let (m, cached) = spmv_matrix(&s, &who, req.source).await?;
    // x and y, and for a matrix used for this call only its device buffers
    // (host memory on a CPU device), count against the memory budget.
    let once = if cached { 0 } else { device_bytes(&m.host, p) };
    let binary_y = wants_binary(&headers);
    let bytes_y = binary_y && !req.verify;
    held.grow_by(spmv_estimate(m.host.nrows(), m.host.ncols(), binary_y) + once)
        .await?;
    check_x(&s, &x, &m, p).await?;
    s.check_device_fit(&m.host, p)?;
    let (planned, exec, setup_ms) = if cached {
        execute_cached(&s, &m, p, &x, bytes_y).await?
    } else {
        execute_once(&s, &m, p, &x, bytes_y).await?
    };
    let kernel_ms = exec.timings.kernel_ms();
    s.metrics()
        .spmv(p.name(), kernel_ms * 1e-3, exec.timings.wall_ms() * 1e-3);
    let (verify, y) = if req.verify {
        let (v, y) = verify_on_host(&m, p, &x, exec.y).await?;
        (Some(v), y)
    } else {
        (None, exec.y)
    };
    if !binary_y {
        check_json_y(&y)?;
    }
    let server_ms = ms(t0);
    s.log_request(record(
        &s,
        &who,
        "/spmv",
        &m,
        &planned,
        p,
        Some(kernel_ms),
        server_ms,
        200,
    ));
    let done = SpmvDone {
        m,
        cached,
        p,
        planned,
        timings: exec.timings,
        launches: exec.launches,
        setup_ms,
        read_ms,
        server_ms,
        verify,
    };
    if binary_y {
        binary_answer(done, y).await
    } else {
        json_answer(done, y).await
    }
}

/// The matrix of an /spmv request: an uploaded one, an inline one already
/// uploaded (same content hash), or an inline one for this call only; and
/// whether it is in the cache.
async fn spmv_matrix(
    s: &AppState,
    who: &Principal,
    source: Source,
) -> Result<(Arc<StoredMatrix>, bool), ApiError> {
    Ok(match source {
        Source::Id(id) => (s.cached(&id, who)?, true),
        Source::Inline(a) => {
            let (s2, who2) = (s.clone(), who.clone());
            let (m, _) = blocking(move || stored_from(&s2, &who2, a, 0.0)).await?;
            match s.try_cached(&m.id, who) {
                Some(c) => (c, true),
                None => (Arc::new(m), false),
            }
        }
    })
}

/// x's length, and without a device its values too (a 4xx rather than the 503
/// that follows); with one, the conversion on the device worker checks the
/// values once, on the way into the staging buffer.
async fn check_x(
    s: &AppState,
    x: &Arc<XIn>,
    m: &StoredMatrix,
    p: Precision,
) -> Result<(), ApiError> {
    let ncols = m.host.ncols();
    if x.len() != ncols {
        return Err(ApiError::XLength {
            expected: ncols,
            found: x.len(),
        });
    }
    if s.device().available() {
        return Ok(());
    }
    let x2 = x.clone();
    blocking(move || match p {
        Precision::F32 => x2.fill(&mut vec![0f32; ncols]),
        Precision::F64 => x2.fill(&mut vec![0f64; ncols]),
    })
    .await?;
    let why = s.device().unavailable.clone().unwrap_or_default();
    Err(ApiError::NoDevice(why))
}

/// Plans, uploads and runs a matrix used for this call only (never tuned: it
/// is multiplied once).
async fn execute_once(
    s: &AppState,
    m: &Arc<StoredMatrix>,
    p: Precision,
    x: &Arc<XIn>,
    bytes_y: bool,
) -> Result<(Planned, Executed, Option<f64>), ApiError> {
    let t = Instant::now();
    let (s2, m2) = (s.clone(), m.clone());
    let planned = blocking(move || Ok(s2.plan(&m2, p, false))).await?;
    let (m2, x2, pl2) = (m.clone(), x.clone(), planned.clone());
    let exec: Executed = s
        .on_device(move |e| {
            let b = upload_blocking(e, &m2.host, p, &pl2)?;
            execute_blocking(e, &b, &x2, bytes_y)
        })
        .await?;
    let setup = ms(t) - exec.timings.wall_ms();
    Ok((planned, exec, Some(setup)))
}

/// Compares y with the reference SpMV on the host (off the runtime).
async fn verify_on_host(
    m: &Arc<StoredMatrix>,
    p: Precision,
    x: &Arc<XIn>,
    y: YVec,
) -> Result<(Value, YVec), ApiError> {
    let (m2, x2) = (m.clone(), x.clone());
    let (v, y) = blocking(move || {
        let v = verify_y(&m2.host, &x2.to_values(), &y)?;
        Ok((v, y))
    })
    .await?;
    if v["ok"] != json!(true) {
        tracing::error!(id = %m.id, precision = %p, report = %v, "device y differs from the reference SpMV");
    }
    Ok((v, y))
}

/// What an /spmv answer reports besides y.
struct SpmvDone {
    m: Arc<StoredMatrix>,
    cached: bool,
    p: Precision,
    planned: Planned,
    timings: engine::Timings,
    launches: usize,
    setup_ms: Option<f64>,
    read_ms: f64,
    server_ms: f64,
    verify: Option<Value>,
}

impl SpmvDone {
    fn min_bytes(&self) -> u64 {
        let h = &self.m.host;
        engine::min_bytes(h.nrows(), h.ncols(), h.nnz(), self.p.bytes())
    }

    fn gbps(&self) -> f64 {
        if self.timings.kernel_ns > 0 {
            self.min_bytes() as f64 / self.timings.kernel_ns as f64
        } else {
            0.0
        }
    }
}

/// y as little-endian bytes, the rest in `x-*` headers.
async fn binary_answer(d: SpmvDone, y: YVec) -> Result<Response, ApiError> {
    let bytes = match y {
        YVec::Bytes(b) => b,
        y => {
            blocking(move || {
                Ok(match &y {
                    YVec::F32(y) => y_binary(y),
                    YVec::F64(y) => y_binary(y),
                    YVec::Bytes(b) => b.clone(),
                })
            })
            .await?
        }
    };
    let mut resp = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )],
        bytes,
    )
        .into_response();
    let h = resp.headers_mut();
    let mut put = |k: &'static str, v: String| {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    };
    let t = &d.timings;
    put("x-matrix-id", d.m.id.clone());
    put("x-precision", d.p.name().into());
    put("x-kernel-ms", t.kernel_ms().to_string());
    put("x-device-ms", t.wall_ms().to_string());
    put("x-upload-x-ms", t.upload_x_ms().to_string());
    put("x-download-y-ms", t.download_y_ms().to_string());
    put("x-server-ms", d.server_ms.to_string());
    put("x-read-ms", d.read_ms.to_string());
    put("x-gbps", d.gbps().to_string());
    put("x-plan-scheme", d.planned.plan.scheme.to_string());
    put("x-model", d.planned.model.id.clone());
    if let Some(t) = &d.planned.tuning {
        put("x-tuned", t.chosen.clone());
    }
    put("x-model-match", d.planned.model.match_level.as_str().into());
    if let Some(v) = &d.verify {
        put("x-verified", v["ok"].to_string());
    }
    Ok(resp)
}

/// The JSON answer, built off the runtime (y can be large): y is written
/// straight from its array after the other fields, with no JSON value per element.
async fn json_answer(d: SpmvDone, y: YVec) -> Result<Response, ApiError> {
    let t = &d.timings;
    let head = json!({
        "matrix_id": d.m.id,
        "matrix": matrix_json(&d.m),
        "precision": d.p.name(),
        "uploaded": d.cached,
        "plan": PlanView::of(&d.planned.plan, &d.planned.binning),
        "model": &d.planned.model,
        "tuning": &d.planned.tuning,
        "launches": d.launches,
        "timings_ms": {
            "kernel": t.kernel_ms(),
            "upload_x": t.upload_x_ms(), "download_y": t.download_y_ms(),
            "device": t.wall_ms(),
            "setup": d.setup_ms,
            "read": d.read_ms,
            "server": d.server_ms,
        },
        "gbps": d.gbps(),
        "min_bytes": d.min_bytes(),
        "verify": d.verify,
    });
    let body = blocking(move || {
        let mut out = serde_json::to_vec(&head).map_err(ApiError::internal)?;
        out.pop(); // the object's closing brace
        out.extend_from_slice(b",\"y\":");
        match &y {
            YVec::F32(y) => serde_json::to_writer(&mut out, y),
            YVec::F64(y) => serde_json::to_writer(&mut out, y),
            YVec::Bytes(_) => {
                return Err(ApiError::internal(
                    "y was encoded as bytes for a JSON answer",
                ))
            }
        }
        .map_err(ApiError::internal)?;
        out.push(b'}');
        Ok(out)
    })
    .await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response())
}
