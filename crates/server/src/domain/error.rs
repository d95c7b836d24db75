//! The one error type of the service, every layer's: [`ApiError`], its
//! machine-readable codes and the conversions from the other crates' errors.
//! Its HTTP status codes and JSON body are `http::error`'s.

use sparse::error::ParseErrorKind;
use sparse::SparseError;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A request that is malformed in a way no other variant describes (400).
    #[error("{0}")]
    BadRequest(String),
    /// The Matrix Market text could not be parsed; the message names the line (400).
    #[error("malformed Matrix Market input: {0}")]
    MatrixMarket(SparseError),
    /// A binary CSR body (`application/vnd.spmv-select.csr`) whose header or
    /// length is wrong: magic, version, widths, flags, or a length other than
    /// the header declares (400).
    #[error("malformed binary CSR body: {0}")]
    BinaryCsr(String),
    /// The JSON body could not be parsed or has the wrong shape (400).
    #[error("malformed JSON: {0}")]
    Json(String),
    /// The matrix arrays are inconsistent with each other (422).
    #[error("invalid matrix: {0}")]
    InvalidMatrix(SparseError),
    /// A NaN or infinite value in the matrix or in x; only finite values are accepted (422).
    #[error("{0}; only finite values are accepted (NaN and infinities are rejected)")]
    NonFinite(String),
    /// x does not have one entry per matrix column (422).
    #[error("x has {found} entries but the matrix has {expected} columns")]
    XLength {
        /// Number of columns of the matrix.
        expected: usize,
        /// Number of entries given.
        found: usize,
    },
    /// The request is well-formed but cannot be served as asked (422), such as a
    /// missing `x` or a field of the wrong kind.
    #[error("{0}")]
    Unprocessable(String),
    /// A precision other than `f32` or `f64` (422).
    #[error("unsupported precision '{0}': use f32 or f64")]
    Precision(String),
    /// A body, dimension or nonzero count over the configured limit (413).
    #[error("{what} is {value}, over the limit of {limit}")]
    TooLarge {
        /// What was too large (`body bytes`, `rows`, `cols`, `nnz`, ...).
        what: String,
        /// Its size.
        value: u64,
        /// The configured limit.
        limit: u64,
    },
    /// A Matrix Market size line declaring more than the limits or the body
    /// allow (413); the message names the line.
    #[error("{0}")]
    Declared(SparseError),
    /// Gzip inside gzip: only one layer is decoded (415).
    #[error("the gzip data holds gzip again: only one layer of gzip compression is accepted")]
    NestedGzip,
    /// y holds a value JSON cannot carry (422); binary output carries it.
    #[error("y[{row}] = {value} is not finite (the product overflows or multiplies an infinity by zero), and JSON cannot carry it; ask for binary y with Accept: application/octet-stream")]
    NonFiniteResult {
        /// First row whose value is not finite.
        row: usize,
        /// Its value, printed.
        value: String,
    },
    /// The memory budget for requests in flight is spent; retry later (503).
    #[error("the server is busy: this request needs about {needed} bytes of memory and {in_use} of the {budget} bytes for requests in flight are in use; retry in {retry_after_s} s")]
    Busy {
        /// Bytes this request was estimated to need.
        needed: u64,
        /// Bytes held by other requests.
        in_use: u64,
        /// The budget.
        budget: u64,
        /// Seconds to wait, sent as `Retry-After`.
        retry_after_s: u64,
    },
    /// A content type the endpoint does not accept (415).
    #[error("unsupported content type '{found}'; {expected}")]
    MediaType {
        /// The content type received.
        found: String,
        /// What the endpoint accepts, in words.
        expected: String,
    },
    /// No uploaded matrix has this id (never uploaded, deleted or evicted) (404).
    #[error("no matrix with id '{0}' (never uploaded, deleted, or evicted from the cache; upload it again with POST /matrices)")]
    NotFound(String),
    /// No such route (404).
    #[error("no route for {0}")]
    NoRoute(String),
    /// The route exists but not with this method (405).
    #[error("method not allowed: {0}")]
    MethodNotAllowed(String),
    /// The matrix and vectors do not fit the device's memory (507).
    #[error("too big for the device: {what} needs {needed} bytes but device '{device}' allows {available} bytes")]
    DeviceMemory {
        /// Which buffer, or "matrix and vectors" for the total.
        what: String,
        /// Bytes the upload needs.
        needed: u64,
        /// Bytes the device allows (global memory, or the largest single allocation).
        available: u64,
        /// The device's name.
        device: String,
    },
    /// The device queue is full; the client should retry after the given seconds (503).
    #[error("the device queue is full ({depth} jobs admitted); retry in {retry_after_s} s")]
    QueueFull {
        /// The configured queue depth.
        depth: usize,
        /// Seconds to wait, sent as `Retry-After`.
        retry_after_s: u64,
    },
    /// No OpenCL device is available; /predict still works (503).
    #[error(
        "no OpenCL device is available ({0}); POST /predict still works, /spmv needs a device"
    )]
    NoDevice(String),
    /// The device failed while serving the request (an OpenCL error); the
    /// request can be retried (503 with the reason).
    #[error("the OpenCL device failed: {0}; retry the request")]
    DeviceFault(String),
    /// The device is being rebuilt after a fault (or could not be reopened
    /// yet); the request can be retried (503 with `Retry-After`).
    #[error("the OpenCL device is being recovered: {reason}; retry in {retry_after_s} s")]
    Recovering {
        /// What happened and where the recovery stands.
        reason: String,
        /// Seconds to wait, sent as `Retry-After`.
        retry_after_s: u64,
    },
    /// The request's deadline passed while its device job waited (it was
    /// dropped without running) or ran (it finishes and its result is
    /// discarded: a running kernel cannot be interrupted) (503).
    #[error("{}; retry in {retry_after_s} s", if *started {
        format!("the request's deadline passed while its device job was running ({waited_ms} ms after it was queued); the job finishes and its result is discarded")
    } else {
        format!("the request's deadline passed after its device job waited {waited_ms} ms in the device queue; the job was dropped without running")
    })]
    DeviceDeadline {
        /// Milliseconds from admission to the deadline.
        waited_ms: u64,
        /// Whether the job had started on the device.
        started: bool,
        /// Seconds to wait, sent as `Retry-After`.
        retry_after_s: u64,
    },
    /// Too many matrix requests are being worked on; shed at once (503).
    #[error("{in_flight} matrix requests are already in progress (the limit); retry in {retry_after_s} s")]
    Overloaded {
        /// The configured limit.
        in_flight: usize,
        /// Seconds to wait, sent as `Retry-After`.
        retry_after_s: u64,
    },
    /// The results database, which holds the uploads every replica shares,
    /// failed or could not be reached; the request can be retried (503).
    #[error("the shared matrix database is unavailable ({0}); retry the request")]
    Database(String),
    /// The readiness probe failed (503, with the reason).
    #[error("not ready: {0}")]
    NotReady(String),
    /// No API key, or one that is not configured (401).
    #[error("{0}")]
    Unauthorized(String),
    /// The client took too long to send its body (408).
    #[error("the request body was not received within {0} s")]
    BodyTimeout(u64),
    /// The request was not answered within the service's deadline; any device
    /// work it started is abandoned (503, retry later).
    #[error("the request was not answered within {seconds} s; retry in {retry_after_s} s")]
    Deadline {
        /// The configured per-request deadline.
        seconds: u64,
        /// Seconds to wait, sent as `Retry-After`.
        retry_after_s: u64,
    },
    /// A failure inside the server; logged in full, answered generically (500).
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// The machine-readable code sent in the body.
    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            BadRequest(_) => "bad_request",
            MatrixMarket(_) => "invalid_matrix_market",
            Json(_) => "invalid_json",
            BinaryCsr(_) => "invalid_binary_csr",
            InvalidMatrix(_) => "invalid_matrix",
            NonFinite(_) => "non_finite",
            XLength { .. } => "x_length",
            Unprocessable(_) => "unprocessable",
            Precision(_) => "unsupported_precision",
            TooLarge { .. } | Declared(_) => "too_large",
            NestedGzip => "nested_gzip",
            NonFiniteResult { .. } => "non_finite_result",
            Busy { .. } => "busy",
            Overloaded { .. } => "overloaded",
            MediaType { .. } => "unsupported_media_type",
            NotFound(_) => "matrix_not_found",
            NoRoute(_) => "no_route",
            MethodNotAllowed(_) => "method_not_allowed",
            DeviceMemory { .. } => "insufficient_device_memory",
            QueueFull { .. } => "queue_full",
            NoDevice(_) => "no_device",
            BodyTimeout(_) => "body_timeout",
            Unauthorized(_) => "unauthorized",
            DeviceFault(_) => "device_error",
            Recovering { .. } => "device_recovering",
            DeviceDeadline { .. } => "device_deadline",
            NotReady(_) => "not_ready",
            Database(_) => "database_unavailable",
            Deadline { .. } => "deadline",
            Internal(_) => "internal",
        }
    }

    /// Every code [`ApiError::code`] sends (the error schema of `/openapi.json`).
    pub const CODES: &'static [&'static str] = &[
        "bad_request",
        "invalid_matrix_market",
        "invalid_json",
        "invalid_binary_csr",
        "invalid_matrix",
        "non_finite",
        "x_length",
        "unprocessable",
        "unsupported_precision",
        "too_large",
        "nested_gzip",
        "non_finite_result",
        "busy",
        "overloaded",
        "unsupported_media_type",
        "matrix_not_found",
        "no_route",
        "method_not_allowed",
        "insufficient_device_memory",
        "queue_full",
        "no_device",
        "body_timeout",
        "unauthorized",
        "device_error",
        "device_recovering",
        "device_deadline",
        "not_ready",
        "database_unavailable",
        "deadline",
        "internal",
    ];

    /// A size limit error.
    pub fn too_large(
        what: impl Into<String>,
        value: impl TryInto<u64>,
        limit: impl TryInto<u64>,
    ) -> Self {
        ApiError::TooLarge {
            what: what.into(),
            value: value.try_into().unwrap_or(u64::MAX),
            limit: limit.try_into().unwrap_or(u64::MAX),
        }
    }

    /// An internal failure, logged by the response conversion.
    pub fn internal(what: impl std::fmt::Display) -> Self {
        ApiError::Internal(what.to_string())
    }
}

impl From<sparse::ParsePrecisionError> for ApiError {
    fn from(e: sparse::ParsePrecisionError) -> Self {
        ApiError::Precision(e.0)
    }
}

impl From<SparseError> for ApiError {
    /// Parser errors are 400 (with their line), size errors 413, non-finite values
    /// 422, and structural errors of given arrays 422.
    fn from(e: SparseError) -> Self {
        match e {
            SparseError::Parse {
                kind: ParseErrorKind::TooLarge | ParseErrorKind::ExceedsData,
                ..
            } => ApiError::Declared(e),
            SparseError::Parse {
                kind: ParseErrorKind::NestedGzip,
                ..
            } => ApiError::NestedGzip,
            SparseError::Parse { .. } => ApiError::MatrixMarket(e),
            SparseError::TooLarge { what, value, max } => ApiError::TooLarge {
                what: what.to_string(),
                value,
                limit: max,
            },
            SparseError::NonFinite { .. } => ApiError::NonFinite(e.to_string()),
            other => ApiError::InvalidMatrix(other),
        }
    }
}

impl From<store::StoreError> for ApiError {
    /// Every failure of the results database (which holds the uploads the
    /// replicas share) is a 503 the client may retry; the details go to the log.
    fn from(e: store::StoreError) -> Self {
        tracing::warn!(error = %e, "results database failed");
        ApiError::Database(e.to_string())
    }
}

impl From<engine::EngineError> for ApiError {
    /// Size errors are 507 with the sizes, a precision the device lacks 422, a
    /// wrong x length 422, no device 503; the rest are internal.
    fn from(e: engine::EngineError) -> Self {
        use engine::EngineError as E;
        match e {
            E::TooBig {
                what,
                bytes,
                limit,
                device,
            } => ApiError::DeviceMemory {
                what,
                needed: bytes,
                available: limit,
                device,
            },
            E::UnsupportedPrecision { .. } => ApiError::Unprocessable(e.to_string()),
            E::XLength { expected, got } => ApiError::XLength {
                expected,
                found: got,
            },
            E::NoPlatform(_) | E::NoDevice { .. } => ApiError::NoDevice(e.to_string()),
            E::OpenCl(reason) => ApiError::DeviceFault(reason),
            other => ApiError::Internal(format!("engine: {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One error of each variant; the match below has no wildcard, so a new
    /// variant does not compile until it is added here (and its code to `CODES`).
    fn one_of_each() -> Vec<ApiError> {
        let s = || String::from("x");
        let parse = || SparseError::TooLarge {
            what: "rows",
            value: 2,
            max: 1,
        };
        let all = vec![
            ApiError::BadRequest(s()),
            ApiError::MatrixMarket(parse()),
            ApiError::BinaryCsr(s()),
            ApiError::Json(s()),
            ApiError::InvalidMatrix(parse()),
            ApiError::NonFinite(s()),
            ApiError::XLength {
                expected: 1,
                found: 2,
            },
            ApiError::Unprocessable(s()),
            ApiError::Precision(s()),
            ApiError::too_large("rows", 2u64, 1u64),
            ApiError::Declared(parse()),
            ApiError::NestedGzip,
            ApiError::NonFiniteResult { row: 0, value: s() },
            ApiError::Busy {
                needed: 1,
                in_use: 1,
                budget: 1,
                retry_after_s: 1,
            },
            ApiError::MediaType {
                found: s(),
                expected: s(),
            },
            ApiError::NotFound(s()),
            ApiError::NoRoute(s()),
            ApiError::MethodNotAllowed(s()),
            ApiError::DeviceMemory {
                what: s(),
                needed: 1,
                available: 0,
                device: s(),
            },
            ApiError::QueueFull {
                depth: 1,
                retry_after_s: 1,
            },
            ApiError::NoDevice(s()),
            ApiError::DeviceFault(s()),
            ApiError::Recovering {
                reason: s(),
                retry_after_s: 1,
            },
            ApiError::DeviceDeadline {
                waited_ms: 1,
                started: false,
                retry_after_s: 1,
            },
            ApiError::Overloaded {
                in_flight: 1,
                retry_after_s: 1,
            },
            ApiError::Database(s()),
            ApiError::NotReady(s()),
            ApiError::Unauthorized(s()),
            ApiError::BodyTimeout(1),
            ApiError::Deadline {
                seconds: 1,
                retry_after_s: 1,
            },
            ApiError::internal("x"),
        ];
        for e in &all {
            use ApiError::*;
            match e {
                BadRequest(_)
                | MatrixMarket(_)
                | BinaryCsr(_)
                | Json(_)
                | InvalidMatrix(_)
                | NonFinite(_)
                | XLength { .. }
                | Unprocessable(_)
                | Precision(_)
                | TooLarge { .. }
                | Declared(_)
                | NestedGzip
                | NonFiniteResult { .. }
                | Busy { .. }
                | MediaType { .. }
                | NotFound(_)
                | NoRoute(_)
                | MethodNotAllowed(_)
                | DeviceMemory { .. }
                | QueueFull { .. }
                | NoDevice(_)
                | DeviceFault(_)
                | Recovering { .. }
                | DeviceDeadline { .. }
                | Overloaded { .. }
                | Database(_)
                | NotReady(_)
                | Unauthorized(_)
                | BodyTimeout(_)
                | Deadline { .. }
                | Internal(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_code_sent_is_listed_and_every_listed_code_is_sent() {
        let sent: std::collections::BTreeSet<&str> =
            one_of_each().iter().map(ApiError::code).collect();
        let listed: std::collections::BTreeSet<&str> = ApiError::CODES.iter().copied().collect();
        assert_eq!(sent, listed);
        assert_eq!(listed.len(), ApiError::CODES.len(), "a code listed twice");
    }
}
