//! The HTTP handlers, one module per resource, and the helpers they share.
//!
//! The modules: `matrices` (POST /matrices, GET and DELETE /matrices/{id}),
//! `spmv` (POST /spmv), `solve` (POST /matrices/{id}/solve), `spmm` (POST /matrices/{id}/spmm), `predict` (POST /predict) and `ops` (health, readiness
//! helpers, device, models, metrics, OpenAPI, request tracking and the
//! fallbacks) and `ready` (GET /readyz). Their shared prologue is the
//! extractors of [`crate::http::extract`]. Each handler carries its
//! `#[utoipa::path]`: the document's operations come from these annotations and
//! the types of [`crate::http::api`].

pub mod matrices;
pub mod ops;
pub mod predict;
pub mod ready;
pub mod solve;
pub mod spmm;
pub mod spmv;

pub use matrices::{delete_matrix, get_matrix, upload};
pub use ops::{device, healthz, metrics, models, no_route, openapi, track, wrong_method};
pub use predict::predict;
pub use solve::solve;
pub use spmm::spmm;
pub use spmv::spmv;

use crate::device::vector::XIn;
use crate::domain::error::ApiError;
use crate::http::api::{self, MatrixSummary};
use crate::http::extract::matrix::stored_from;
use crate::http::extract::spmv::Source;
use crate::http::extract::{Caller, MatrixCall, PredictQuery, SpmvCall, UploadQuery, UploadedCall};
use crate::http::input::{spmv_estimate, wants_binary, y_binary, Precision};
use crate::service::auth::Principal;
use crate::service::blocking;
use crate::service::planner::{PlanView, Planned};
use crate::service::solve::Solve;
use crate::service::state::{cast_checked, device_bytes, AppState, Ready, StoredMatrix, YVec};
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use sparse::spmv::{compare, spmv_ref};
use sparse::{Csr, Scalar};
use std::sync::Arc;
use std::time::Instant;

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
