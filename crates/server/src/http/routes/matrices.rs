//! `POST /matrices`, `GET /matrices/{id}`, `DELETE /matrices/{id}`: uploaded matrices.

use super::*;
use crate::domain::config::PoolKind;
use crate::http::openapi::{BinaryCsrDoc, BytesDoc, MatrixMarketDoc, PlanParams};

fn on_device(r: &Ready) -> api::OnDevice {
    api::OnDevice {
        precision: r.precision,
        plan: PlanView::of(&r.planned.plan, &r.planned.binning),
        model: r.planned.model.clone(),
        planning: r.planned.planning.clone(),
        device_bytes: r.device_bytes,
        pinned_host_buffers: r.buffers.pools.kind() == PoolKind::Pinned,
        shared_host_buffers: r.buffers.pools.kind() == PoolKind::Shared,
        setup_ms: r.setup_ms,
    }
}

/// Upload a matrix once: parse, plan, put on the device.
///
/// The plan is made for N calls (`expected_calls`, default
/// `--uploaded-expected-calls`); the id is a keyed hash of the content and the
/// owner (the API key), so the same matrix uploaded again by the same caller
/// gets the same id (`already_uploaded`). With a results database (the default)
/// the matrix is written to its `uploads` table before the answer, so every
/// replica on that database can serve it; with --no-database it is kept in
/// this server's memory only.
#[utoipa::path(
    post,
    path = "/matrices",
    tag = "matrices",
    params(PlanParams),
    request_body(
        description = "The matrix: Matrix Market text (gzip accepted with Content-Encoding: gzip or by its magic bytes), a JSON CSR object, or binary CSR without an x section. Values must be finite (NaN and infinities are 422).",
        content(
            (MatrixMarketDoc = "text/plain"),
            (BytesDoc = "application/gzip"),
            (BytesDoc = "application/octet-stream"),
            (crate::http::input::CsrJson = "application/json"),
            (BinaryCsrDoc = "application/vnd.spmv-select.csr"),
        ),
    ),
    responses(
        (status = 201, description = "Stored (or already stored)", body = api::Upload,
            headers(("Location" = String, description = "/matrices/{id}"))),
        (status = 400, description = "invalid_matrix_market, invalid_json, invalid_binary_csr or bad_request (an unknown or malformed query parameter)", body = api::ErrorBody),
        api::BodyErrors,
        (status = 413, description = "too_large: the body, the declared sizes, the host copy plus device buffers over the cache, or a binary CSR encoding over 10^9 bytes (the shared database's limit)", body = api::ErrorBody),
        (status = 422, description = "invalid_matrix, non_finite (values that overflow f32 included), unprocessable (a precision the device lacks), unsupported_precision", body = api::ErrorBody),
        (status = 503, description = "busy, overloaded, queue_full, device_error, device_recovering, device_deadline (with Retry-After), or database_unavailable (the shared database failed)", body = api::ErrorBody),
        (status = 507, description = "insufficient_device_memory: the matrix and vectors do not fit the device", body = api::ErrorBody),
    ),
)]
pub async fn upload(r: MatrixCall<UploadQuery>) -> Result<Response, ApiError> {
    let s = &r.caller.s;
    let p = r.q.precision.unwrap_or(Precision::DEFAULT);
    let calls =
        r.q.expected_calls
            .unwrap_or(s.config().uploaded_expected_calls);
    // The body's reservation (`r.held`) is held until the answer is built.
    let m = check_upload(s, r.m.with_expected_calls(calls), p).await?;
    let (m, existed) = s.insert(m)?;
    let (ready, created, added) = match keep_upload(s, &m, p).await {
        Ok(kept) => kept,
        Err(e) => {
            // A matrix that cannot be put on the device, or that the
            // database refuses, is not kept here either.
            if !existed {
                s.remove_any(&m.id);
            }
            return Err(e);
        }
    };
    let total_ms = r.caller.ms();
    let planned = match &ready {
        Some(r) => r.planned.clone(),
        None => {
            let (s2, m2) = (s.clone(), m.clone());
            Arc::new(blocking(move || Ok(s2.plan(&m2, p, false))).await?)
        }
    };
    r.caller
        .log("/matrices", &m, &planned, p, None, total_ms, 201);
    let [parse, features, hash] = r.times;
    let body = api::Upload {
        id: m.id.clone(),
        matrix: MatrixSummary::of(&m),
        precision: p,
        plan: PlanView::of(&planned.plan, &planned.binning),
        model: planned.model.clone(),
        planning: planned.planning.clone(),
        tuning: planned.tuning.clone(),
        // A copy cached here whose row another replica deleted is a new upload.
        already_uploaded: existed && !created && added != Some(true),
        on_device: ready.is_some(),
        device: s.device().name().map(str::to_string),
        bytes: api::UploadBytes {
            host: m.host_bytes(),
            device: ready.as_ref().map_or(0, |r| r.device_bytes),
        },
        timings_ms: api::UploadTimings {
            parse,
            features,
            hash,
            setup: ready.as_ref().filter(|_| created).map(|r| r.setup_ms),
            total: total_ms,
        },
    };
    let mut resp = (StatusCode::CREATED, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("/matrices/{}", m.id)) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

/// Refuses, before any device work or caching, an upload that can never be
/// kept: over the cache, too big for the device or a precision it lacks, too
/// large for the shared database, or with values that overflow f32.
async fn check_upload(
    s: &AppState,
    m: StoredMatrix,
    p: Precision,
) -> Result<StoredMatrix, ApiError> {
    let need = m.host_bytes() + device_bytes(&m.host, p);
    let cap = s.config().cache_bytes as u64;
    if need > cap {
        return Err(ApiError::too_large(
            "matrix bytes (host copy plus device buffers)",
            need,
            cap,
        ));
    }
    s.check_device_fit(&m.host, p)?;
    s.check_shareable(&m.host)?;
    blocking(move || {
        if p == Precision::F32 {
            cast_checked::<f32>(&m.host)?;
        }
        Ok(m)
    })
    .await
}

/// Puts a cached upload on the device in precision `p` (when there is one)
/// and writes it where every replica reaches it: its device state, whether
/// this call made that, and whether a database row was added (`None`
/// without a database).
async fn keep_upload(
    s: &AppState,
    m: &Arc<StoredMatrix>,
    p: Precision,
) -> Result<(Option<Arc<Ready>>, bool, Option<bool>), ApiError> {
    let (ready, created) = if s.device().available() {
        let (r, c) = s.ensure_ready(m, p).await?;
        (Some(r), c)
    } else {
        (None, false)
    };
    Ok((ready, created, s.share_upload(m).await?))
}

/// An uploaded matrix: sizes, features, plans per precision, bytes.
///
/// A replica that has not cached the matrix reads it from the shared database
/// (the owner is checked as for its own uploads).
#[utoipa::path(
    get,
    path = "/matrices/{id}",
    tag = "matrices",
    params(("id" = String, Path, description = "The id returned by POST /matrices")),
    responses(
        (status = 200, description = "The matrix", body = api::MatrixInfo),
        (status = 404, description = "matrix_not_found: never uploaded, deleted on any replica, evicted, or another API key's", body = api::ErrorBody),
        (status = 503, description = "database_unavailable: the shared database failed (Retry-After)", body = api::ErrorBody),
    ),
)]
pub async fn get_matrix(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<api::MatrixInfo>, ApiError> {
    // With a database, the row decides (and a replica without a copy loads one).
    s.resolve(&id, &who, true).await?;
    let (m, bytes) = s
        .peek(&id, &who)
        .ok_or_else(|| ApiError::NotFound(id.clone()))?;
    Ok(Json(api::MatrixInfo {
        id: m.id.clone(),
        matrix: MatrixSummary::of(&m),
        features: api::features(m.features()),
        bytes: api::MatrixBytes {
            host: m.host_bytes(),
            total: bytes,
        },
        uploaded: m.all_ready().iter().map(|r| on_device(r)).collect(),
    }))
}

/// Forget an uploaded matrix: gone on every replica sharing the database.
///
/// Its database row, and this replica's host copy and device buffers, are
/// removed; other replicas drop theirs at their next use.
#[utoipa::path(
    delete,
    path = "/matrices/{id}",
    tag = "matrices",
    params(("id" = String, Path, description = "The id returned by POST /matrices")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "matrix_not_found: never uploaded, already deleted, or another API key's", body = api::ErrorBody),
        (status = 503, description = "database_unavailable: the shared database failed (Retry-After)", body = api::ErrorBody),
    ),
)]
pub async fn delete_matrix(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if s.delete_upload(&id, &who).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(id))
    }
}
