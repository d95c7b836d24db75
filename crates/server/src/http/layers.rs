//! Cross-cutting layers assembled by [`crate::http::app`]: the per-request deadline
//! (a JSON 503 with `Retry-After`, also given to the request's device jobs), and the JSON 500 answered when a handler
//! panics (the panic is logged; the process and other requests are unaffected).

use crate::device::queue::DEADLINE;
use crate::domain::error::ApiError;
use crate::service::state::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::any::Any;
use std::time::Duration;

/// Answers 503 when the request is not answered within `--request-timeout-s`.
/// Its device job, if any, has the same deadline: still queued then, it is
/// dropped without running (and answered with that reason); running, it
/// finishes on the device worker and its result is discarded.
pub async fn deadline(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let seconds = s.config().request_timeout_s;
    let at = std::time::Instant::now() + Duration::from_secs(seconds);
    let served = DEADLINE.scope(at, next.run(req));
    match tokio::time::timeout_at(at.into(), served).await {
        Ok(resp) => resp,
        Err(_) => {
            s.metrics().deadline_exceeded();
            ApiError::Deadline {
                seconds,
                retry_after_s: s.config().retry_after_s,
            }
            .into_response()
        }
    }
}

/// Sheds matrix requests (POST) past `--max-in-flight` with a quick 503, so
/// that overload is answered at once instead of queueing CPU work without bound.
pub async fn shed(State(s): State<AppState>, req: Request, next: Next) -> Response {
    if req.method() != axum::http::Method::POST {
        return next.run(req).await;
    }
    match s.work_permits().clone().try_acquire_owned() {
        Ok(permit) => {
            let resp = next.run(req).await;
            drop(permit);
            resp
        }
        Err(_) => {
            s.metrics().queue_full();
            // Reading a small body to its end keeps the connection usable for
            // the client's next request; a large one is not read, and the
            // connection is closed after the answer instead.
            let drained = drain(req.into_body(), SHED_DRAIN_BYTES).await;
            let mut resp = ApiError::Overloaded {
                in_flight: s.config().max_in_flight,
                retry_after_s: s.config().retry_after_s,
            }
            .into_response();
            if !drained {
                resp.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
            }
            resp
        }
    }
}

/// Bytes of a shed request's body read and dropped so the connection stays open.
const SHED_DRAIN_BYTES: usize = 1 << 20;

/// Reads and drops a body; true when it ended within `limit` bytes.
async fn drain(body: axum::body::Body, limit: usize) -> bool {
    use futures_util::StreamExt;
    let mut stream = body.into_data_stream();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => {
                seen += c.len();
                if seen > limit {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// The response for a panicking handler.
pub fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let what = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("a non-text panic payload");
    ApiError::internal(format!("a handler panicked: {what}")).into_response()
}

/// CORS for the configured origins only; with none, no CORS header is sent and
/// browsers keep other sites' pages from calling the service.
pub fn cors(origins: &[String]) -> tower_http::cors::CorsLayer {
    use axum::http::{HeaderValue, Method};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let list: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o.trim()).ok())
        .collect();
    if list.is_empty() {
        return CorsLayer::new();
    }
    CorsLayer::new()
        .allow_origin(AllowOrigin::list(list))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers([
            axum::http::header::CONTENT_TYPE,
            axum::http::header::AUTHORIZATION,
            axum::http::HeaderName::from_static("x-api-key"),
        ])
}
