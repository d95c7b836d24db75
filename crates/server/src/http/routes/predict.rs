//! `POST /predict`: the plan for a matrix, without running it.

use super::*;
use crate::http::openapi::{BinaryCsrDoc, BytesDoc, ExplainParams, MatrixMarketDoc, PlanParams};

/// Plan a matrix: features, the plan, the model used, the predicted time.
///
/// The plan for N calls (`expected_calls`; default: an upload's,
/// `--uploaded-expected-calls`), with the decision paths on `explain=true`.
/// Nothing runs on the device: this works without one.
#[utoipa::path(
    post,
    path = "/predict",
    tag = "matrices",
    params(ExplainParams, PlanParams),
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
        (status = 200, description = "The plan", body = api::Prediction),
        (status = 400, description = "invalid_matrix_market, invalid_json, invalid_binary_csr or bad_request (an unknown or malformed query parameter)", body = api::ErrorBody),
        api::BodyErrors,
        (status = 413, description = "too_large: the body, its decompressed size or the declared rows, columns or nonzeros over the limits", body = api::ErrorBody),
        (status = 422, description = "invalid_matrix, non_finite, unprocessable, unsupported_precision", body = api::ErrorBody),
        (status = 503, description = "busy (the memory budget for requests in flight is spent) or overloaded (--max-in-flight), with Retry-After", body = api::ErrorBody),
    ),
)]
pub async fn predict(r: MatrixCall<PredictQuery>) -> Result<Response, ApiError> {
    let (s, q) = (&r.caller.s, &r.q);
    let calls = q
        .expected_calls
        .unwrap_or(s.config().uploaded_expected_calls);
    let p = q.precision.unwrap_or(Precision::DEFAULT);
    let explain = q.explain.unwrap_or(false);
    // The body's reservation (`r.held`) is held until the answer is built.
    let [parse_ms, features_ms, hash_ms] = r.times;
    let (s2, m) = (s.clone(), r.m.with_expected_calls(calls));
    let (m, planned, predicted, predict_ms) = blocking(move || {
        let t = Instant::now();
        let planned = s2.plan(&m, p, explain);
        let predicted = s2
            .planner()
            .predict_time(p, m.features(), &planned.plan, &planned.binning)
            .map(|t| s2.calibrate(p, t));
        Ok((m, planned, predicted, ms(t)))
    })
    .await?;
    let total_ms = r.caller.ms();
    r.caller
        .log("/predict", &m, &planned, p, None, total_ms, 200);
    Ok(Json(api::Prediction {
        matrix: MatrixSummary::of(&m),
        precision: p,
        features: api::features(m.features()),
        plan: PlanView::of(&planned.plan, &planned.binning),
        model: planned.model,
        planning: planned.planning,
        predicted_ms: predicted,
        timings_ms: api::PredictTimings {
            parse: parse_ms,
            features: features_ms,
            hash: hash_ms,
            predict: predict_ms,
            total: total_ms,
        },
        explanation: planned.explanation,
    })
    .into_response())
}
