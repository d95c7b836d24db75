//! The HTTP layer: the documented route list, the routes, the middleware, the
//! typed request extractors, the wire types, the OpenAPI document, and how
//! errors are answered; it sees `service`, `device` and `domain` below it.

pub mod api;
pub mod auth;
pub mod error;
pub mod extract;
pub mod input;
pub mod layers;
pub mod openapi;
pub mod routes;

use crate::service::state::AppState;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Every route with its OpenAPI operation (from each handler's
/// `#[utoipa::path]`): the one list both [`crate::app`] and [`openapi::document`] use.
pub fn routes_documented() -> OpenApiRouter<AppState> {
    use routes::{matrices, ops, predict, ready, solve, spmm, spmv};
    OpenApiRouter::with_openapi(openapi::Frame::openapi())
        .routes(routes!(predict::predict))
        .routes(routes!(matrices::upload))
        .routes(routes!(matrices::get_matrix, matrices::delete_matrix))
        .routes(routes!(spmv::spmv))
        .routes(routes!(solve::solve))
        .routes(routes!(spmm::spmm))
        .routes(routes!(ops::healthz))
        .routes(routes!(ready::readyz))
        .routes(routes!(ops::device))
        .routes(routes!(ops::models))
        .routes(routes!(ops::metrics))
        .routes(routes!(ops::openapi))
}
