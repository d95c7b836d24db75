//! `GET /readyz`: readiness, as opposed to `/healthz`'s liveness. It runs a
//! tiny SpMV on the device through the same queue as real work and checks the
//! answer against the reference SpMV, so a wedged or wrong device, or a queue
//! that is full, shows here. The outcome is kept for a few seconds so that
//! frequent probes do not load the device, and forgotten when a device fault
//! drops the engine; while the engine is rebuilt the answer is 503 with why,
//! without a probe.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::Engine;
use serde::Serialize;
use sparse::spmv::{compare, spmv_ref};
use sparse::{Csr, KernelId};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a probe's outcome answers further probes.
const KEEP: Duration = Duration::from_secs(3);

/// The body of a ready answer.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(as = Readiness)]
pub struct Ready {
    /// Always "ready".
    pub status: &'static str,
    /// The device probed.
    pub device: String,
    /// Wall time of the probe, x upload to y download, in milliseconds.
    pub probe_ms: f64,
    /// How old this outcome is, in milliseconds.
    pub age_ms: f64,
}

/// The last probe's outcome.
#[derive(Default)]
pub struct ProbeCache(Mutex<Option<Probed>>);

/// When a probe ran, on which engine generation, and its outcome.
type Probed = (Instant, u64, Result<Ready, String>);

impl ProbeCache {
    /// Forgets the last outcome (the engine it probed is gone).
    pub fn clear(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// A 3x3 matrix with an empty row and a cancellation, on the serial kernel;
/// also how a rebuilt engine is checked before it serves.
pub(crate) fn probe(engine: &Engine) -> Result<f64, ApiError> {
    let t = Instant::now();
    let a = Csr::<f64>::from_triplets(3, 3, &[0, 0, 2, 2], &[0, 2, 1, 2], &[2.0, -1.0, 3.0, 0.5])
        .map_err(ApiError::internal)?;
    let x = [1.0, 2.0, 4.0];
    let y_ref = spmv_ref(&a, &x).map_err(ApiError::internal)?;
    let m = engine.upload(&a)?;
    let pp = engine.prepare_kernel(&m, KernelId::Serial)?;
    let (y, _) = engine.execute(&m, &pp, &x)?;
    let c = compare(&a, &x, &y, &y_ref);
    if !c.ok() {
        return Err(ApiError::DeviceFault(format!(
            "the readiness SpMV gave {y:?} instead of {y_ref:?}"
        )));
    }
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

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
        (status = 503, description = "not_ready: no device, the device is rebuilding or down, the probe failed or gave a wrong answer, or the queue is full", body = crate::api::ErrorBody),
    ),
)]
pub async fn readyz(State(s): State<AppState>) -> Response {
    if let (state @ ("rebuilding" | "down"), Some(why)) = s.device_slot().state() {
        return ApiError::NotReady(format!("device {state}: {why}")).into_response();
    }
    let cache = s.probe_cache();
    // An outcome is kept only for the engine it probed.
    let generation = s.device_slot().generation();
    let kept = cache
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .filter(|(at, g, _)| at.elapsed() < KEEP && *g == generation)
        .map(|(at, _, r)| (*at, r.clone()));
    let (at, outcome) = match kept {
        Some(k) => k,
        None => {
            let device = s.device().name().unwrap_or("").to_string();
            let outcome = s
                .on_device(probe)
                .await
                .map(|probe_ms| Ready {
                    status: "ready",
                    device,
                    probe_ms,
                    age_ms: 0.0,
                })
                .map_err(|e| e.to_string());
            let now = Instant::now();
            *cache.0.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((now, generation, outcome.clone()));
            (now, outcome)
        }
    };
    match outcome {
        Ok(mut r) => {
            r.age_ms = at.elapsed().as_secs_f64() * 1e3;
            Json(r).into_response()
        }
        Err(reason) => ApiError::NotReady(reason).into_response(),
    }
}
