//! Load behaviour: many simultaneous /spmv calls on several uploaded matrices
//! are all correct with no 5xx; a full device queue answers 503 with
//! Retry-After; the cache evicts the least recently used matrix under a small
//! byte limit, and the evicted id then answers 404 without a database (with
//! one, it is read back from the database).

use crate::common;

use common::*;
use serde_json::json;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_simultaneous_spmv_on_several_matrices_are_all_correct() {
    let Some((app, _)) = device_app("many_simultaneous_spmv", &["--queue-depth", "256"]).await
    else {
        return;
    };
    let mats: Vec<_> = (0..4)
        .map(|i| random_matrix(400 + 100 * i, 300, 100 + i as u64))
        .collect();
    let mut ids = Vec::new();
    for (i, a) in mats.iter().enumerate() {
        let p = if i % 2 == 0 { "f32" } else { "f64" };
        let r = send(
            &app,
            post(
                &format!("/matrices?precision={p}"),
                "text/plain",
                mm_text(a),
            ),
        )
        .await;
        assert_eq!(r.status, 201);
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }
    let mats = Arc::new(mats);
    let mut tasks = Vec::new();
    for k in 0..64u64 {
        let (app, mats, ids) = (app.clone(), mats.clone(), ids.clone());
        tasks.push(tokio::spawn(async move {
            let i = (k % 4) as usize;
            let p = if k % 3 == 0 { "f32" } else { "f64" };
            let x = random_x(300, k);
            let body = json!({"matrix_id": ids[i], "x": x, "precision": p});
            let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
            let y = y_of(&r.json_ok(&format!("call {k}")));
            match p {
                "f32" => check_y::<f32>(&mats[i], &x, &y),
                _ => check_y::<f64>(&mats[i], &x, &y),
            }
        }));
    }
    for t in tasks {
        t.await.expect("a request task panicked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_answers_503_with_retry_after() {
    let Some((app, state)) = device_app(
        "a_full_queue_answers_503",
        &["--queue-depth", "1", "--retry-after", "2"],
    )
    .await
    else {
        return;
    };
    let a = random_matrix(100, 100, 20);
    let r = send(&app, post("/matrices", "text/plain", mm_text(&a))).await;
    assert_eq!(r.status, 201);
    let id = r.json()["id"].as_str().unwrap().to_string();

    // Occupy the only queue slot with a job that waits for our signal.
    let (release, wait) = std::sync::mpsc::channel::<()>();
    let s2 = state.clone();
    let slow = tokio::spawn(async move {
        s2.queue()
            .run(move |_| wait.recv().expect("released"))
            .await
    });
    while state.queue().in_flight() == 0 {
        tokio::task::yield_now().await;
    }
    let body = json!({"matrix_id": id, "x": random_x(100, 1)});
    let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.headers["retry-after"], "2");
    let (code, msg) = r.error();
    assert_eq!(code, "queue_full");
    assert!(msg.contains("device queue is full"), "{msg}");

    // Once the slot frees up, the same request succeeds.
    release.send(()).unwrap();
    slow.await.unwrap().unwrap();
    let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let metrics = String::from_utf8(send(&app, get("/metrics")).await.body.to_vec()).unwrap();
    assert!(metrics.contains("spmv_queue_rejected_total 1"), "{metrics}");
}

#[tokio::test]
async fn a_depth_zero_queue_refuses_all_device_work_but_not_predict() {
    let (app, state) = test_app(&["--queue-depth", "0"]).await;
    let a = random_matrix(50, 50, 21);
    let r = send(&app, post("/predict", "text/plain", mm_text(&a))).await;
    assert_eq!(r.status, 200);
    if !state.device().available() {
        eprintln!("SKIP the /spmv half: no OpenCL platform");
        return;
    }
    let body = json!({"matrix": mm_text(&a), "x": random_x(50, 1)});
    let r = send(&app, post("/spmv", "application/json", body.to_string())).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.error().0, "queue_full");
}

#[tokio::test]
async fn cache_evicts_least_recently_used_then_404() {
    // Without a device only host copies are charged, which makes the byte
    // arithmetic exact; the device case is covered below.
    let a = random_matrix(200, 200, 30);
    let b = random_matrix(200, 200, 31);
    let c = random_matrix(200, 200, 32);
    // One byte short of holding all three: exactly one must go. Each entry is
    // charged its CSR arrays plus a fixed overhead (id, features, bookkeeping).
    let over = server::state::ENTRY_OVERHEAD as usize;
    let total = a.bytes() + b.bytes() + c.bytes() + 3 * over - 1;
    let cap = total.to_string();
    let (app, state) = test_app(&["--no-device", "--no-database", "--cache-bytes", &cap]).await;
    let up = |m: &sparse::Csr<f64>| post("/matrices", "text/plain", mm_text(m));
    let id_of = |r: Resp| {
        assert_eq!(r.status, 201);
        r.json()["id"].as_str().unwrap().to_string()
    };
    let ida = id_of(send(&app, up(&a)).await);
    let idb = id_of(send(&app, up(&b)).await);
    // Touch a: b becomes the least recently used.
    let x = json!({"matrix_id": ida, "x": random_x(200, 1)});
    send(&app, post("/spmv", "application/json", x.to_string())).await;
    let idc = id_of(send(&app, up(&c)).await);
    let r = send(&app, get(&format!("/matrices/{idb}"))).await;
    assert_eq!(r.status, 404, "b should have been evicted");
    assert_eq!(r.error().0, "matrix_not_found");
    let r = send(
        &app,
        post_json("/spmv", json!({"matrix_id": idb, "x": random_x(200, 1)})),
    )
    .await;
    assert_eq!(r.status, 404);
    for id in [&ida, &idc] {
        assert_eq!(
            send(&app, get(&format!("/matrices/{id}"))).await.status,
            200
        );
    }
    assert_eq!(state.gauges().cache_bytes, a.bytes() + c.bytes() + 2 * over);
}

#[tokio::test]
async fn with_a_database_an_evicted_upload_is_read_back() {
    let a = random_matrix(200, 200, 33);
    let b = random_matrix(200, 200, 34);
    // Room for what an upload must fit (host copy and device buffers), which
    // is less than two host copies with their fixed overheads.
    let over = server::state::ENTRY_OVERHEAD;
    let need = |m: &sparse::Csr<f64>| {
        m.bytes() as u64 + over + server::state::device_bytes(m, server::input::Precision::F64)
    };
    let cap = need(&a).max(need(&b));
    assert!(cap < (a.bytes() + b.bytes()) as u64 + 2 * over);
    let cap = cap.to_string();
    let (app, state) = test_app(&["--no-device", "--cache-bytes", &cap]).await;
    let mut ids = Vec::new();
    for m in [&a, &b] {
        let r = send(&app, post("/matrices", "text/plain", mm_text(m))).await;
        assert_eq!(r.status, 201);
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }
    assert_eq!(state.gauges().cache_entries, 1, "a was evicted by b");
    let r = send(&app, get(&format!("/matrices/{}", ids[0]))).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["matrix"]["nnz"], a.nnz());
    assert_eq!(r.json()["features"], common_features(&a));
    assert_eq!(state.gauges().cache_entries, 1, "b made way for a");
    // Deleted, it is gone from the database too: no copy comes back.
    let del = axum::http::Request::delete(format!("/matrices/{}", ids[1]))
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(send(&app, del).await.status, 204);
    assert_eq!(
        send(&app, get(&format!("/matrices/{}", ids[1])))
            .await
            .status,
        404
    );
}

/// The features of `a` as GET /matrices/{id} shows them.
fn common_features(a: &sparse::Csr<f64>) -> serde_json::Value {
    let f = sparse::Features::of(a);
    serde_json::Value::Object(f.named().map(|(n, v)| (n.to_string(), json!(v))).collect())
}

#[tokio::test]
async fn cache_evicts_device_buffers_too() {
    if !have_device("cache_evicts_device_buffers_too") {
        return;
    }
    let a = random_matrix(300, 300, 40);
    let b = random_matrix(300, 300, 41);
    let per = |m: &sparse::Csr<f64>| {
        m.bytes() as u64 + server::state::device_bytes(m, server::input::Precision::F64)
    };
    // Room for one matrix with its f64 device buffers, not two.
    let cap = (per(&a).max(per(&b)) * 3 / 2).to_string();
    let (app, state) = test_app(&["--no-database", "--cache-bytes", &cap]).await;
    let mut ids = Vec::new();
    for m in [&a, &b] {
        let r = send(&app, post("/matrices", "text/plain", mm_text(m))).await;
        assert_eq!(r.status, 201);
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }
    let x = random_x(300, 2);
    let r = send(
        &app,
        post_json("/spmv", json!({"matrix_id": ids[0], "x": x})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
    let r = send(
        &app,
        post_json("/spmv", json!({"matrix_id": ids[1], "x": x})),
    )
    .await;
    assert_eq!(r.status, 200);
    check_y::<f64>(&b, &x, &y_of(&r.json()));
    assert!(state.gauges().cache_bytes as u64 <= per(&a).max(per(&b)) * 3 / 2);
    // Everything b holds is charged: CSR, device buffers, and beyond them the
    // plan's row lists and the prepared launches.
    let r = send(&app, get(&format!("/matrices/{}", ids[1]))).await;
    let total = r.json()["bytes"]["total"].as_u64().unwrap();
    assert!(
        total > per(&b) + 2 * server::state::ENTRY_OVERHEAD,
        "{total} vs {}",
        per(&b)
    );
}

#[tokio::test]
async fn the_device_fit_counts_what_the_cache_already_holds_on_the_device() {
    if !have_device("device_fit_counts_the_cache") {
        return;
    }
    let a = random_matrix(400, 400, 50);
    let b = random_matrix(400, 400, 51);
    let need = |m: &sparse::Csr<f64>| server::state::device_bytes(m, server::input::Precision::F64);
    // Room on the device for one of them, not both (the cache itself is large).
    let limit = (need(&a).max(need(&b)) * 3 / 2).to_string();
    let (app, state) = test_app(&["--no-database", "--device-memory-bytes", &limit]).await;
    let mut ids = Vec::new();
    for m in [&a, &b] {
        let r = send(&app, post("/matrices", "text/plain", mm_text(m))).await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        ids.push(r.json()["id"].as_str().unwrap().to_string());
    }
    // a made room for b on the device: it is gone, b is there, and what the
    // cache holds on the device stays within the limit.
    assert_eq!(
        send(&app, get(&format!("/matrices/{}", ids[0])))
            .await
            .status,
        404
    );
    assert_eq!(
        send(&app, get(&format!("/matrices/{}", ids[1])))
            .await
            .status,
        200
    );
    assert!(state.device_bytes_in_use() <= need(&a).max(need(&b)) * 3 / 2);
    assert!(state.device_bytes_in_use() > 0);
}

#[tokio::test]
async fn a_failing_database_is_a_503_and_keeps_nothing() {
    let (app, state) = test_app(&["--no-device"]).await;
    let a = random_matrix(50, 50, 35);
    let r = send(&app, post("/matrices", "text/plain", mm_text(&a))).await;
    assert_eq!(r.status, 201);
    let id = r.json()["id"].as_str().unwrap().to_string();
    state.store().unwrap().close().await;
    let r = send(&app, get(&format!("/matrices/{id}"))).await;
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.error().0, "database_unavailable");
    assert!(r.error().1.contains("retry"), "{}", r.error().1);
    assert!(r.headers.contains_key("retry-after"));
    let b = random_matrix(50, 50, 36);
    let r = send(&app, post("/matrices", "text/plain", mm_text(&b))).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.error().0, "database_unavailable");
    assert_eq!(state.gauges().cache_entries, 1, "b is not kept");
    let spmv = json!({"matrix_id": id, "x": random_x(50, 1)});
    let r = send(&app, post("/spmv", "application/json", spmv.to_string())).await;
    assert_eq!(r.status, 503);
}
