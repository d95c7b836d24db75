//! The SpMV HTTP service: users POST a matrix to `/predict` to see the plan the
//! selector chooses, upload it once to `/matrices`, and POST x to `/spmv` to get
//! y = A x computed on the OpenCL device with that plan, as many times as they like.
//!
//! The whole service is [`app`]: a `Router` over an [`AppState`], so tests drive
//! it with `tower::ServiceExt::oneshot` without a socket.
//!
//! Architecture: four layers, imports pointing one way (checked by
//! `scripts/import_graph.py`): [`http`] (routes, extractors, wire types, the
//! OpenAPI document) -> [`service`] (matrices, planning, tuning, budget) ->
//! [`device`] (queue, worker, recovery, host pools) -> [`domain`] (config,
//! the one error type [`ApiError`], the binary CSR codec). Device work goes
//! through the bounded queue to one worker thread and never runs on the async
//! runtime. The modules re-exported below keep their old public paths.

pub mod device;
pub mod domain;
pub mod http;
pub mod serve;
pub mod service;

pub use domain::{config, csr_binary, error};
pub use http::{api, input, openapi, routes, routes_documented};
pub use service::{auth, metrics, planner, state, tune};

pub use config::{Config, Limits};
pub use error::ApiError;
pub use planner::Planner;
pub use state::{AppState, DeviceState};

use axum::middleware::from_fn_with_state;
use axum::Router;
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;

/// The service: every route, the metrics middleware, JSON 404/405 answers.
pub fn app(state: AppState) -> Router {
    let (router, _) = routes_documented().split_for_parts();
    router
        .route_layer(from_fn_with_state(state.clone(), http::auth::authenticate))
        .route_layer(from_fn_with_state(state.clone(), routes::track))
        .method_not_allowed_fallback(routes::wrong_method)
        .fallback(routes::no_route)
        // Bodies are read by the handlers with the configured limit (a JSON 413),
        // so axum's own default limit is lifted.
        .layer(axum::extract::DefaultBodyLimit::disable())
        // A body trickled in slower than the deadline fails its read (a JSON 408).
        .layer(RequestBodyTimeoutLayer::new(Duration::from_secs(
            state.config().body_timeout_s.max(1),
        )))
        .layer(from_fn_with_state(state.clone(), http::layers::deadline))
        .layer(from_fn_with_state(state.clone(), http::layers::shed))
        .layer(CatchPanicLayer::custom(http::layers::panic_response))
        .layer(http::layers::cors(&state.config().cors_origins))
        .with_state(state)
}
