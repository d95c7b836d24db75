//! `GET /readyz`: readiness, as opposed to `/healthz`'s liveness (the probe
//! and its kept outcome are `service::readiness`).

use crate::service::readiness::{readiness, Ready};
use crate::service::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// Readiness: 200 when the device answers a tiny SpMV correctly, else 503
/// with the reason.
///
/// The probe runs through the same queue as real work; its outcome answers
/// further probes for a few seconds.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Ready),
        (status = 503, description = "not_ready: no device, the device is rebuilding or down, the probe failed or gave a wrong answer, or the queue is full", body = crate::http::api::ErrorBody),
    ),
)]
pub async fn readyz(State(s): State<AppState>) -> Response {
    match readiness(&s).await {
        Ok(r) => Json(r).into_response(),
        Err(e) => e.into_response(),
    }
}
