//! `/readyz` runs a real SpMV on the device; `/healthz` only says the process
//! is alive. Device errors are retryable 503s with the reason.

use crate::common;

use common::*;
use std::time::Duration;

#[tokio::test]
async fn readyz_probes_the_device_and_keeps_the_outcome_briefly() {
    let Some((app, state)) = device_app("readyz_probes_the_device", &[]).await else {
        return;
    };
    let r = send(&app, get("/readyz")).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["status"], "ready");
    assert_eq!(v["device"], state.device().name().unwrap());
    assert!(v["probe_ms"].as_f64().unwrap() > 0.0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let again = send(&app, get("/readyz")).await.json();
    assert_eq!(
        again["probe_ms"], v["probe_ms"],
        "the kept outcome is answered"
    );
    assert!(again["age_ms"].as_f64().unwrap() >= 20.0);
}

#[tokio::test]
async fn readyz_is_503_without_a_device_while_healthz_is_200() {
    let (app, _) = test_app(&["--no-device"]).await;
    let r = send(&app, get("/readyz")).await;
    let msg = r.error_of(503, "not_ready");
    assert!(msg.contains("no OpenCL device"), "{msg}");
    assert_eq!(send(&app, get("/healthz")).await.status, 200);
}

#[tokio::test]
async fn readyz_is_503_when_the_device_queue_is_full() {
    let Some((app, state)) = device_app("readyz_queue_full", &["--queue-depth", "1"]).await else {
        return;
    };
    let (release, busy) = hold_worker(&state).await;
    let r = send(&app, get("/readyz")).await;
    assert_eq!(r.status, 503);
    assert!(r.error().1.contains("queue is full"), "{:?}", r.error());
    release.send(()).unwrap();
    busy.await.unwrap().unwrap();
}

#[test]
fn an_opencl_error_is_a_retryable_503_with_its_reason() {
    use axum::response::IntoResponse;
    let e: server::ApiError = engine::EngineError::OpenCl("CL_OUT_OF_RESOURCES".into()).into();
    assert_eq!(e.code(), "device_error");
    assert!(e.to_string().contains("CL_OUT_OF_RESOURCES"));
    let resp = e.into_response();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
}

#[tokio::test]
async fn matrix_requests_past_the_in_flight_limit_are_shed_at_once() {
    let (app, state) = test_app(&["--no-device", "--max-in-flight", "1"]).await;
    let held = state.work_permits().clone().try_acquire_owned().unwrap();
    let t = std::time::Instant::now();
    let body = mm_text(&random_matrix(30, 30, 3));
    let r = send(&app, post("/predict", "text/plain", body.clone())).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.error().0, "overloaded");
    assert!(r.headers.contains_key("retry-after"));
    assert!(t.elapsed() < Duration::from_millis(500));
    // Reads are not shed, and once the slot frees the same request is served.
    assert_eq!(send(&app, get("/healthz")).await.status, 200);
    drop(held);
    assert_eq!(
        send(&app, post("/predict", "text/plain", body))
            .await
            .status,
        200
    );
}
