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

pub mod api;
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
pub mod pool;
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
pub mod xbody;

pub use config::{Config, Limits};
pub use error::ApiError;
pub use planner::Planner;
pub use state::{AppState, DeviceState};

use axum::middleware::from_fn_with_state;
use axum::Router;
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Every route with its OpenAPI operation (from each handler's
/// `#[utoipa::path]`): the one list both [`app`] and [`openapi::document`] use.
pub fn routes_documented() -> OpenApiRouter<AppState> {
    use routes::{matrices, ops, predict, spmv};
    OpenApiRouter::with_openapi(openapi::Frame::openapi())
        .routes(routes!(predict::predict))
        .routes(routes!(matrices::upload))
        .routes(routes!(matrices::get_matrix, matrices::delete_matrix))
        .routes(routes!(spmv::spmv))
        .routes(routes!(ops::healthz))
        .routes(routes!(ready::readyz))
        .routes(routes!(ops::device))
        .routes(routes!(ops::models))
        .routes(routes!(ops::metrics))
        .routes(routes!(ops::openapi))
}

/// The service: every route, the metrics middleware, JSON 404/405 answers.
pub fn app(state: AppState) -> Router {
    let (router, _) = routes_documented().split_for_parts();
    router
        .route_layer(from_fn_with_state(state.clone(), auth::authenticate))
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
        .layer(from_fn_with_state(state.clone(), layers::deadline))
        .layer(from_fn_with_state(state.clone(), layers::shed))
        .layer(CatchPanicLayer::custom(layers::panic_response))
        .layer(layers::cors(&state.config().cors_origins))
        .with_state(state)
}
