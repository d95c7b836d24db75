//! `POST /matrices`, `GET /matrices/{id}`, `DELETE /matrices/{id}`: uploaded matrices.

use super::*;

fn ready_json(r: &Ready) -> Value {
    json!({
        "precision": r.precision.name(),
        "plan": PlanView::of(&r.planned.plan, &r.planned.binning),
        "model": r.planned.model,
        "planning": r.planned.planning,
        "device_bytes": r.device_bytes,
        "setup_ms": r.setup_ms,
    })
}

/// `POST /matrices[?precision=f32|f64][&expected_calls=N]`: parse, plan for
/// N calls (default `--uploaded-expected-calls`), upload once.
pub async fn upload(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let q = Query::parse(q.as_deref(), &["precision", "expected_calls"])?;
    let p = q.precision.unwrap_or(Precision::DEFAULT);
    let calls = q
        .expected_calls
        .unwrap_or(s.config().uploaded_expected_calls);
    // The reservation is held until the answer is built.
    let (m, [parse_ms, features_ms, hash_ms], _held) =
        read_matrix(&s, &who, &headers, body).await?;
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
    // Also refuse, before caching, a matrix the device cannot hold or a
    // precision it lacks, or one too large for the shared database.
    s.check_device_fit(&m.host, p)?;
    s.check_shareable(&m.host)?;
    let m = m.with_expected_calls(calls);
    let m = blocking(move || {
        if p == Precision::F32 {
            cast_checked::<f32>(&m.host)?;
        }
        Ok(m)
    })
    .await?;
    let (m, existed) = s.insert(m)?;
    let (ready, created, added) = match keep_upload(&s, &m, p).await {
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
        "planning": planned.planning,
        "tuning": planned.tuning,
        // A copy cached here whose row another replica deleted is a new upload.
        "already_uploaded": existed && !created && added != Some(true),
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

/// `GET /matrices/{id}`.
pub async fn get_matrix(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    // With a database, the row decides (and a replica without a copy loads one).
    s.resolve(&id, &who, true).await?;
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

/// `DELETE /matrices/{id}`: gone on every replica sharing the database.
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
