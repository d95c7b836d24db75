//! Device faults and device-job deadlines, on the real (PoCL) device. A fault
//! is injected with `AppState::inject_device_faults` (the next device jobs fail
//! with an OpenCL error, the next rebuild attempts fail); everything after
//! that is the service's own recovery: the 503 for the faulted request, the
//! rebuild, `/readyz` not ready then ready, and the next request on the same
//! uploaded matrix re-uploading it and computing a correct y.

use crate::common;

use common::*;
use serde_json::json;
use std::time::{Duration, Instant};

/// The value of a counter or gauge line in the /metrics text (0 when absent).
async fn metric(app: &axum::Router, name: &str) -> f64 {
    let text = String::from_utf8(send(app, get("/metrics")).await.body.to_vec()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Polls /readyz until it answers 200, failing after `limit`.
async fn until_ready(app: &axum::Router, limit: Duration) -> Duration {
    let t = Instant::now();
    loop {
        let r = send(app, get("/readyz")).await;
        if r.status == 200 {
            return t.elapsed();
        }
        assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
        assert!(
            t.elapsed() < limit,
            "not ready {:?} after the fault: {:?}",
            t.elapsed(),
            r.error()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Uploads `a` and returns its id.
/// A /spmv answered after the engine was rebuilt: 200, a correct y, and the
/// matrix uploaded again to the new engine (a setup time is reported).
fn assert_run_after_upload(r: &Resp, a: &sparse::Csr<f64>, x: &[f64]) {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    check_y::<f64>(a, x, &y_of(&v));
    assert!(
        v["timings_ms"]["setup"].as_f64().is_some(),
        "not re-uploaded: {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_fault_rebuilds_the_engine_and_the_next_request_works() {
    if !have_device("a_device_fault_rebuilds_the_engine") {
        return;
    }
    // A device of its own (not the one the test binary shares), to see that
    // the faulted engine is really let go.
    let dev = tokio::task::spawn_blocking(|| server::DeviceState::open(None))
        .await
        .unwrap();
    let first = std::sync::Arc::downgrade(dev.engine.as_ref().expect("a device"));
    let (app, state) = test_app_with(&["--rebuild-backoff-ms", "1500"], dev).await;
    let (a, x) = random_problem(400, 300, 40);
    let id = upload(&app, &a).await;
    let body = json!({"matrix_id": id, "x": x, "precision": "f64"}).to_string();
    let r = send(&app, post("/spmv", "application/json", body.clone())).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(send(&app, get("/readyz")).await.status, 200);
    assert!(state.device_bytes_in_use() > 0);
    let generation = state.device_slot().generation();

    // The next device job fails as a lost context would; the first attempt
    // to reopen the device fails too (so the rebuild takes >= 1.5 s).
    state.inject_device_faults(1, 1);
    let r = send(&app, post("/spmv", "application/json", body.clone())).await;
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.headers.contains_key("retry-after"));
    let (code, msg) = r.error();
    assert_eq!(code, "device_error");
    assert!(msg.contains("CL_OUT_OF_RESOURCES"), "{msg}");

    // The engine was given up at once: not ready (with why), device work is
    // refused with Retry-After, and no device buffers are held any more ...
    let r = send(&app, get("/readyz")).await;
    let msg = r.error_of(503, "not_ready");
    assert!(
        msg.contains("rebuilding") && msg.contains("CL_OUT_OF_RESOURCES"),
        "{msg}"
    );
    let r = send(&app, post("/spmv", "application/json", body.clone())).await;
    assert_eq!(r.status, 503);
    assert!(r.headers.contains_key("retry-after"));
    assert_eq!(r.error().0, "device_recovering", "{:?}", r.error());
    assert_eq!(state.device_bytes_in_use(), 0);
    assert!(state.device_slot().generation() > generation);
    assert!(
        first.upgrade().is_none(),
        "the faulted engine is still held"
    );
    assert_eq!(metric(&app, "spmv_device_up").await, 0.0);
    // ... but the host copy of the uploaded matrix is still there.
    let r = send(&app, get(&format!("/matrices/{id}"))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["uploaded"], json!([]));

    let took = until_ready(&app, Duration::from_secs(180)).await;
    eprintln!("ready again {took:?} after the fault");
    assert_eq!(metric(&app, "spmv_device_up").await, 1.0);

    // The same uploaded matrix: re-uploaded to the new engine, correct y.
    let r = send(&app, post("/spmv", "application/json", body.clone())).await;
    assert_run_after_upload(&r, &a, &x);
    assert!(state.device_bytes_in_use() > 0);
    assert_eq!(metric(&app, "spmv_device_faults_total").await, 1.0);
    assert_eq!(
        metric(&app, "spmv_device_rebuild_failures_total").await,
        1.0
    );
    assert_eq!(metric(&app, "spmv_device_rebuilds_total").await, 1.0);
    let d = send(&app, get("/device")).await.json();
    assert_eq!(d["state"], "up");
    assert_eq!(d["generation"].as_u64(), Some(generation + 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_cannot_be_reopened_is_down_until_a_later_request_retries() {
    let flags = ["--rebuild-attempts", "2", "--rebuild-backoff-ms", "100"];
    let Some((app, state)) = device_app("a_device_that_cannot_be_reopened", &flags).await else {
        return;
    };
    let (a, x) = random_problem(120, 120, 41);
    let id = upload(&app, &a).await;
    let body = json!({"matrix_id": id, "x": x}).to_string();

    // Both attempts of the first round fail.
    state.inject_device_faults(1, 2);
    let r = send(&app, post("/spmv", "application/json", body.clone())).await;
    assert_eq!(r.error().0, "device_error");
    let t = Instant::now();
    let msg = loop {
        let r = send(&app, get("/readyz")).await;
        assert_eq!(r.status, 503);
        let msg = r.error().1;
        if msg.contains("device down") {
            break msg;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{msg}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(msg.contains("could not be reopened in 2 attempts"), "{msg}");
    assert!(msg.contains("injected"), "{msg}");
    assert_eq!(
        metric(&app, "spmv_device_rebuild_failures_total").await,
        2.0
    );
    assert_eq!(metric(&app, "spmv_device_rebuilds_total").await, 0.0);

    // After the cool-down (400 ms here) a request starts another round.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = send(&app, post("/spmv", "application/json", body.clone())).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.error().0, "device_recovering");
    until_ready(&app, Duration::from_secs(180)).await;
    let r = send(&app, post("/spmv", "application/json", body)).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    check_y::<f64>(&a, &x, &y_of(&r.json()));
    assert_eq!(metric(&app, "spmv_device_rebuilds_total").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_job_queued_past_its_deadline_is_dropped_and_its_memory_released() {
    let Some((app, state)) = device_app(
        "a_device_job_queued_past_its_deadline",
        &["--request-timeout-s", "1"],
    )
    .await
    else {
        return;
    };
    let (a, x) = random_problem(200, 200, 42);
    let id = upload(&app, &a).await;
    let body = json!({"matrix_id": id, "x": x}).to_string();

    // Keep the device worker busy past the request's deadline.
    let (release, busy) = hold_worker(&state).await;
    let t = Instant::now();
    let r = send(&app, post("/spmv", "application/json", body.clone())).await;
    let took = t.elapsed();
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.headers.contains_key("retry-after"));
    let (code, msg) = r.error();
    assert_eq!(code, "device_deadline");
    assert!(msg.contains("dropped without running"), "{msg}");
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // Answered: its memory-budget reservation is back, though the worker has
    // not reached its (cancelled) job yet.
    assert_eq!(state.budget().in_use(), 0);
    assert_eq!(state.queue().in_flight(), 2);

    release.send(()).unwrap();
    busy.await.unwrap().unwrap();
    queue_empties(
        &state,
        Duration::from_secs(5),
        "the dropped job holds its slot",
    )
    .await;
    assert_eq!(metric(&app, "spmv_device_jobs_expired_total").await, 1.0);
    assert_eq!(metric(&app, "spmv_device_jobs_discarded_total").await, 0.0);
    // Nothing ran on the device for it, and the next request is served.
    assert_eq!(metric(&app, "spmv_device_faults_total").await, 0.0);
    let r = send(&app, post("/spmv", "application/json", body)).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    check_y::<f64>(&a, &x, &y_of(&r.json()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_queued_behind_a_fault_is_run_on_the_rebuilt_engine() {
    let Some((app, state)) = device_app("a_request_queued_behind_a_fault", &[]).await else {
        return;
    };
    let (a, x) = random_problem(250, 250, 43);
    let id = upload(&app, &a).await;
    let body = json!({"matrix_id": id, "x": x}).to_string();

    // Queue: a job holding the worker, a job failing with an OpenCL error,
    // then the /spmv whose device buffers belong to the engine that fails.
    let (release, busy) = hold_worker(&state).await;
    let s2 = state.clone();
    let failing = tokio::spawn(async move {
        s2.on_device(|_| -> Result<(), server::ApiError> {
            Err(server::ApiError::DeviceFault(
                "CL_INVALID_COMMAND_QUEUE (test)".into(),
            ))
        })
        .await
    });
    while state.queue().in_flight() < 2 {
        tokio::task::yield_now().await;
    }
    let app2 = app.clone();
    let spmv =
        tokio::spawn(async move { send(&app2, post("/spmv", "application/json", body)).await });
    while state.queue().in_flight() < 3 {
        tokio::task::yield_now().await;
    }
    release.send(()).unwrap();
    busy.await.unwrap().unwrap();
    let e = failing.await.unwrap().unwrap_err();
    assert_eq!(e.code(), "device_error");

    // The /spmv found a newer engine than its buffers': it was uploaded again
    // to the rebuilt engine and run there, with a correct y.
    let r = spmv.await.unwrap();
    assert_run_after_upload(&r, &a, &x);
    assert_eq!(metric(&app, "spmv_device_faults_total").await, 1.0);
    assert_eq!(metric(&app, "spmv_device_rebuilds_total").await, 1.0);
    let r = send(&app, get(&format!("/matrices/{id}"))).await.json();
    assert_eq!(r["uploaded"].as_array().map(Vec::len), Some(1), "{r}");
}
