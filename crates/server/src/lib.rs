//! The SpMV HTTP service: users POST a matrix to `/predict` to see the plan the
//! selector chooses, upload it once to `/matrices`, and POST x to `/spmv` to get
//! y = A x computed on the OpenCL device with that plan, as many times as they like.
//!
//! The whole service is [`app`]: a `Router` over an [`AppState`], so tests drive
//! it with `tower::ServiceExt::oneshot` without a socket.
//!
//! Architecture invariant: this is the only crate that knows HTTP and the JSON
//! request types. Matrices enter through [`input`] (which validates them once);
//! device work goes through the bounded [`queue`] to one worker thread and never
//! runs on the async runtime; every error is an [`error::ApiError`].

pub mod auth;
pub mod budget;
pub mod cache;
pub mod config;
pub mod csr_binary;
pub mod error;
pub mod input;
pub mod keep;
pub mod layers;
pub mod metrics;
pub mod openapi;
pub mod planner;
pub mod queue;
pub mod ready;
pub mod recovery;
pub mod request;
pub mod request_log;
pub mod routes;
pub mod serve;
pub mod shared;
pub mod state;
pub mod tune;

pub use config::{Config, Limits};
pub use error::ApiError;
pub use planner::Planner;
pub use state::{AppState, DeviceState};

use axum::routing::{get, post};
use axum::Router;
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;

/// The service: every route, the metrics middleware, JSON 404/405 answers.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/predict", post(routes::predict))
        .route("/matrices", post(routes::upload))
        .route(
            "/matrices/{id}",
            get(routes::get_matrix).delete(routes::delete_matrix),
        )
        .route("/spmv", post(routes::spmv))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(ready::readyz))
        .route("/device", get(routes::device))
        .route("/models", get(routes::models))
        .route("/metrics", get(routes::metrics))
        .route("/openapi.json", get(routes::openapi))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            routes::track,
        ))
        .method_not_allowed_fallback(routes::wrong_method)
        .fallback(routes::no_route)
        // Bodies are read by the handlers with the configured limit (a JSON 413),
        // so axum's own default limit is lifted.
        .layer(axum::extract::DefaultBodyLimit::disable())
        // A body trickled in slower than the deadline fails its read (a JSON 408).
        .layer(RequestBodyTimeoutLayer::new(Duration::from_secs(
            state.config().body_timeout_s.max(1),
        )))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            layers::deadline,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            layers::shed,
        ))
        .layer(CatchPanicLayer::custom(layers::panic_response))
        .layer(layers::cors(&state.config().cors_origins))
        .with_state(state)
}
