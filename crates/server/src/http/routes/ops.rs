//! Informational routes (health, device, models, metrics, OpenAPI), request
//! tracking and the fallbacks for unknown routes and methods.

use super::*;

/// Counts every routed request in the metrics, logs it, and records failed
/// matrix requests in the results database (successful ones are recorded by
/// their handlers, with features and plan).
pub async fn track(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().to_string();
    let t0 = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    let secs = t0.elapsed().as_secs_f64();
    s.metrics().request(&route, &method, status, secs);
    tracing::debug!(%method, %route, status, ms = secs * 1e3, "request");
    if status >= 400 && matches!(route.as_str(), "/predict" | "/matrices" | "/spmv") {
        s.log_request(store::RequestRecord {
            route,
            matrix_hash: None,
            features: None,
            plan: None,
            precision: None,
            device: s.device().name().map(str::to_string),
            model: None,
            kernel_ms: None,
            e2e_ms: Some(secs * 1e3),
            status,
        });
    }
    resp
}

/// A JSON 404 for unknown routes.
pub async fn no_route(req: Request) -> ApiError {
    ApiError::NoRoute(format!("{} {}", req.method(), req.uri().path()))
}

/// A JSON 405 for known routes with another method.
pub async fn wrong_method(req: Request) -> ApiError {
    ApiError::MethodNotAllowed(format!("{} {}", req.method(), req.uri().path()))
}

/// Liveness: the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "Up", body = api::Health)),
)]
pub async fn healthz(State(s): State<AppState>) -> Json<api::Health> {
    Json(api::Health {
        status: "ok",
        device: s.device().available(),
        uptime_s: s.uptime_s(),
    })
}

/// The OpenCL device: name, vendor, memory, copy bandwidth measured at
/// start-up (or why there is none); state (up, rebuilding after a fault, down)
/// with state_reason, and the engine's generation (one more per fault).
#[utoipa::path(
    get,
    path = "/device",
    tag = "operations",
    responses((status = 200, description = "The device, or why there is none", body = api::DeviceReport)),
)]
pub async fn device(State(s): State<AppState>) -> Json<api::DeviceReport> {
    let d = s.device();
    let (state, reason) = s.device_slot().state();
    Json(match d.info() {
        Some(i) => api::DeviceReport::Up(Box::new(api::DeviceUp {
            available: true,
            name: i.name.clone(),
            vendor: i.vendor.clone(),
            platform: i.platform.clone(),
            kind: i.kind.clone(),
            driver: i.driver.clone(),
            version: i.version.clone(),
            compute_units: i.compute_units,
            global_mem_bytes: i.global_mem_bytes,
            max_alloc_bytes: i.max_alloc_bytes,
            local_mem_bytes: i.local_mem_bytes,
            max_work_group_size: i.max_work_group_size,
            fp64: i.fp64,
            state,
            state_reason: reason,
            generation: s.device_slot().generation(),
            copy_bandwidth: d.copy.as_ref().map(|c| api::CopyBandwidth {
                gbps: c.gbps,
                bytes: c.bytes,
                median_ms: c.median_ms,
                peak_gbps: c.peak_gbps,
                min_ms: c.min_ms,
            }),
            shared_memory: d.shared.map_or("mapped", |(kind, _)| kind),
            in_place_min_bytes: d.shared.map_or(0, |(_, min)| min as u64),
        })),
        None => api::DeviceReport::Down(api::DeviceDown {
            available: false,
            reason: d.unavailable.clone(),
        }),
    })
}

/// Model files found (file names only), how close each is to this device or
/// why it is refused, and the selector used for each precision (the closest
/// usable model, else the rule baseline).
#[utoipa::path(
    get,
    path = "/models",
    tag = "operations",
    responses((status = 200, description = "Models", body = api::Models)),
)]
pub async fn models(State(s): State<AppState>) -> Response {
    let p = s.planner();
    Json(api::Models {
        folder: p.folder(),
        found: p.found(),
        device: p.device(),
        in_use: api::InUse {
            f32: p.used(Precision::F32),
            f64: p.used(Precision::F64),
        },
        files: p.files(),
    })
    .into_response()
}

/// Prometheus metrics (OpenMetrics text): requests by route and status,
/// latency histograms of request, queue and kernel time, cache bytes, queue.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "OpenMetrics text exposition",
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String)),
)]
pub async fn metrics(State(s): State<AppState>) -> Response {
    let text = s.metrics().render(s.gauges());
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(crate::service::metrics::CONTENT_TYPE),
        )],
        text,
    )
        .into_response()
}

/// This document: OpenAPI 3.1, generated from the server's routes and types.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "OpenAPI 3.1", content_type = "application/json", body = Object)),
)]
pub async fn openapi() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        crate::http::openapi::document(),
    )
        .into_response()
}
