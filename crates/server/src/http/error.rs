//! How an [`ApiError`] is answered over HTTP: its status code and JSON body
//! `{"error": {"code", "message"}}` (with `Retry-After` where it applies);
//! internal failures are logged in full and answered generically.

use crate::domain::error::ApiError;
use crate::http::api::{ErrorBody, ErrorDetail};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

impl ApiError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            BadRequest(_) | MatrixMarket(_) | BinaryCsr(_) | Json(_) => StatusCode::BAD_REQUEST,
            InvalidMatrix(_)
            | NonFinite(_)
            | NonFiniteResult { .. }
            | XLength { .. }
            | Unprocessable(_)
            | Precision(_) => StatusCode::UNPROCESSABLE_ENTITY,
            TooLarge { .. } | Declared(_) => StatusCode::PAYLOAD_TOO_LARGE,
            MediaType { .. } | NestedGzip => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            NotFound(_) | NoRoute(_) => StatusCode::NOT_FOUND,
            MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            DeviceMemory { .. } => StatusCode::INSUFFICIENT_STORAGE,
            BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Unauthorized(_) => StatusCode::UNAUTHORIZED,
            QueueFull { .. }
            | NoDevice(_)
            | Deadline { .. }
            | DeviceFault(_)
            | Recovering { .. }
            | DeviceDeadline { .. }
            | NotReady(_)
            | Database(_)
            | Busy { .. }
            | Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let message = match &self {
            ApiError::Internal(details) => {
                tracing::error!(%details, "internal error while serving a request");
                "internal error; the details are in the server log".to_string()
            }
            other => other.to_string(),
        };
        if status.is_client_error() {
            tracing::debug!(status = status.as_u16(), code = self.code(), %message, "request rejected");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message,
            },
        };
        let mut resp = (status, axum::Json(body)).into_response();
        let retry_after = match self {
            ApiError::QueueFull { retry_after_s, .. }
            | ApiError::Deadline { retry_after_s, .. }
            | ApiError::Busy { retry_after_s, .. }
            | ApiError::Overloaded { retry_after_s, .. }
            | ApiError::Recovering { retry_after_s, .. }
            | ApiError::DeviceDeadline { retry_after_s, .. } => Some(retry_after_s),
            ApiError::DeviceFault(_) | ApiError::Database(_) => Some(1),
            _ => None,
        };
        if let Some(s) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}
