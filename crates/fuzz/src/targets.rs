//! What each input is run through, and what counts as a failure: a panic
//! (caught by the caller), or an HTTP answer that is a 5xx other than 503.

use crate::seeds::Kind;
use axum::body::Body;
use axum::http::Request;
use server::{app, AppState, Config, DeviceState, Limits, Planner};
use tower::ServiceExt;

/// Size limits of the harness: small, so that memory stays bounded whatever
/// the input declares, and a decompression cap below the budget's first step
/// (the path where an earlier version panicked).
pub const FLAGS: &[&str] = &[
    "server",
    "--no-device",
    "--no-database",
    "--max-body-bytes",
    "1048576",
    "--max-decompressed-bytes",
    "524288",
    "--max-rows",
    "1000000",
    "--max-cols",
    "1000000",
    "--max-nnz",
    "2000000",
    "--memory-budget-bytes",
    "268435456",
    "--memory-wait-ms",
    "1000",
];

/// The readers under test, with one service instance (no device, no database).
pub struct Targets {
    rt: tokio::runtime::Runtime,
    app: axum::Router,
    limits: Limits,
}

impl Targets {
    /// Builds the service with [`FLAGS`] and the given models folder.
    pub fn new(models: &std::path::Path) -> Targets {
        use clap::Parser;
        let config = Config::parse_from(FLAGS);
        let limits = Limits::from(&config);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let state = AppState::new(
            config,
            DeviceState::none("fuzzing"),
            Planner::load(models, None),
            None,
        );
        Targets {
            rt,
            app: app(state),
            limits,
        }
    }

    /// The Matrix Market reader, in both precisions, with the service's limits.
    pub fn matrix_market(&self, input: &[u8]) -> bool {
        let opts = sparse::mm::ReadOptions {
            complex_real_part: input.len().is_multiple_of(2),
        };
        let lim = self.limits.mm();
        let a = sparse::mm::read_bytes_with::<f64>(input, &opts, &lim);
        if input.len().is_multiple_of(3) {
            let _ = sparse::mm::read_bytes_with::<f32>(input, &opts, &lim);
        }
        let _ = sparse::mm::read_header(input, &opts, &lim);
        a.is_ok()
    }

    /// The JSON CSR reader of the service.
    pub fn json_csr(&self, input: &[u8]) -> bool {
        server::input::parse_json_csr(input, &self.limits).is_ok()
    }

    /// The binary CSR reader of the service.
    pub fn binary_csr(&self, input: &[u8]) -> bool {
        server::csr_binary::parse(input, &self.limits).is_ok()
    }

    /// The whole HTTP input path: the route and content type follow the kind;
    /// returns the status, or an error for a 5xx other than 503.
    pub fn http(&self, kind: Kind, input: &[u8], variant: u8) -> Result<u16, String> {
        let (uri, ct) = match (kind, variant % 3) {
            (Kind::MatrixMarket, 0) => ("/predict", "text/plain"),
            (Kind::MatrixMarket, 1) => ("/matrices", "text/plain"),
            (Kind::MatrixMarket, _) => ("/predict", "application/octet-stream"),
            (Kind::Json, 0) => ("/predict", "application/json"),
            (Kind::Json, _) => ("/spmv", "application/json"),
            (Kind::Multipart, _) => ("/spmv", "multipart/form-data; boundary=B"),
            (Kind::BinaryCsr, 0) => ("/predict", server::csr_binary::CONTENT_TYPE),
            (Kind::BinaryCsr, 1) => ("/matrices", server::csr_binary::CONTENT_TYPE),
            (Kind::BinaryCsr, _) => ("/spmv", server::csr_binary::CONTENT_TYPE),
        };
        let mut req = Request::post(uri).header("content-type", ct);
        if variant % 7 == 3 {
            req = req.header("content-encoding", "gzip");
        }
        let req = req
            .body(Body::from(input.to_vec()))
            .map_err(|e| e.to_string())?;
        let app = self.app.clone();
        let (status, body) = self.rt.block_on(async move {
            let resp = app.oneshot(req).await.expect("the router never fails");
            let status = resp.status().as_u16();
            let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .unwrap_or_default();
            (status, body)
        });
        if status >= 500 && status != 503 {
            return Err(format!(
                "{uri} ({ct}) answered {status}: {}",
                String::from_utf8_lossy(&body)
            ));
        }
        Ok(status)
    }
}
