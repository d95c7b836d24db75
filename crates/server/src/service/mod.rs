//! The service layer: matrices and their device versions, cache, planning,
//! tuning, budget, readiness, metrics and request log, through
//! [`state::AppState`]; it sees `device` and `domain`, never `http`.

pub mod auth;
pub mod budget;
pub mod cache;
pub mod keep;
pub mod metrics;
pub mod planner;
pub mod readiness;
pub mod request_log;
pub mod shared;
pub mod solve;
pub mod state;
pub mod tune;

use crate::domain::error::ApiError;

/// Runs CPU-bound request work off the async runtime.
pub async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> Result<R, ApiError> + Send + 'static,
) -> Result<R, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("blocking task: {e}")))?
}
