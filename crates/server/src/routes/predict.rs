//! `POST /predict`: the plan for a matrix, without running it.

use super::*;

/// `POST /predict[?explain=true][&precision=f32|f64][&expected_calls=N]`: the
/// plan for N calls (default: an upload's, `--uploaded-expected-calls`).
pub async fn predict(
    State(s): State<AppState>,
    Extension(who): Extension<Principal>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let q = Query::parse(q.as_deref(), &["explain", "precision", "expected_calls"])?;
    let calls = q
        .expected_calls
        .unwrap_or(s.config().uploaded_expected_calls);
    let p = q.precision.unwrap_or(Precision::DEFAULT);
    let explain = q.explain.unwrap_or(false);
    // The reservation is held until the answer is built.
    let (m, [parse_ms, features_ms, hash_ms], _held) =
        read_matrix(&s, &who, &headers, body).await?;
    let (s2, m) = (s.clone(), m.with_expected_calls(calls));
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
        "planning": planned.planning,
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
