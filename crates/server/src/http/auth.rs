//! The auth layer: reads the API key a request presents (`Authorization:
//! Bearer` or `X-API-Key`), attaches the caller's [`Principal`] or answers 401;
//! the routes open to anyone. The keys themselves are `service::auth`.

use crate::domain::error::ApiError;
use crate::service::auth::Principal;
use crate::service::state::AppState;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;

/// Routes open to anyone: liveness, readiness and the API description.
pub const OPEN_ROUTES: [&str; 3] = ["/healthz", "/readyz", "/openapi.json"];

fn is_open(path: &str) -> bool {
    OPEN_ROUTES.contains(&path)
}

/// The key a request carries, from `Authorization: Bearer` or `X-API-Key`.
fn presented_key(req: &Request) -> Option<&str> {
    let h = req.headers();
    if let Some(v) = h.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        return v.strip_prefix("Bearer ").map(str::trim);
    }
    h.get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The auth layer: attaches a [`Principal`] to every request, or answers 401.
pub async fn authenticate(
    State(s): State<AppState>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let keys = s.keys();
    let principal = if keys.is_empty() {
        Principal::anonymous()
    } else {
        let presented = presented_key(&req);
        match presented.and_then(|k| keys.principal(k)) {
            Some(p) => p,
            None if is_open(req.uri().path()) => Principal::anonymous(),
            None if presented.is_some() => {
                return Err(ApiError::Unauthorized("the API key is not valid".into()))
            }
            None => {
                return Err(ApiError::Unauthorized(
                    "this service needs an API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'".into(),
                ))
            }
        }
    };
    req.extensions_mut().insert(principal);
    Ok(next.run(req).await)
}
