//! Readiness: the outcome of the readiness SpMV (`device::probe`) run through
//! the device queue, kept a few seconds and forgotten when the engine is dropped;
//! while the engine is rebuilt, why, without a probe.

use crate::device::probe::probe;
use crate::domain::error::ApiError;
use crate::service::state::AppState;
use serde::Serialize;
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

/// Whether the device is ready: the kept outcome of a recent probe on the
/// engine in use, or a new probe through the device queue; `NotReady` with
/// the reason while the engine is rebuilt, down, or when the probe fails.
pub async fn readiness(s: &AppState) -> Result<Ready, ApiError> {
    if let (state @ ("rebuilding" | "down"), Some(why)) = s.device_slot().state() {
        return Err(ApiError::NotReady(format!("device {state}: {why}")));
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
            Ok(r)
        }
        Err(reason) => Err(ApiError::NotReady(reason)),
    }
}
