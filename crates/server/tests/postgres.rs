//! The server binary with a `postgres://` DATABASE_URL: it migrates the
//! database, answers an upload and a multiplication, and its request log lands
//! in PostgreSQL.

use std::net::SocketAddr;
use std::path::Path;
use store::testing::{postgres_database, required};

use crate::common;

use common::process::{http, listening, spawn, stop, Server};

/// Starts the release server on a free loopback port with `database_url`.
fn start(database_url: &str) -> (Server, SocketAddr) {
    let (server, out) = spawn(database_url, &[]);
    (server, listening(out))
}

/// One POST; gives the status and the body.
fn request(addr: SocketAddr, path: &str, content_type: &str, body: &[u8]) -> (u16, String) {
    http(addr, "POST", path, content_type, "", body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_postgres_serves_and_logs_there() {
    if let Err(e) = engine::Engine::new(None) {
        assert!(!required(), "an OpenCL device is required here: {e}");
        eprintln!("SKIP: no OpenCL device ({e})");
        return;
    }
    let Some(url) = postgres_database("a_server_on_postgres_serves_and_logs_there").await else {
        return;
    };
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../sparse/tests/data/HB__can_229.mtx.gz");
    let a: sparse::Csr<f64> = sparse::mm::read_path(&path, &Default::default()).unwrap();
    let (mut server, addr) = start(&url);

    let (status, body) = request(
        addr,
        "/matrices",
        "text/plain",
        &std::fs::read(&path).unwrap(),
    );
    assert_eq!(status, 201, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let x: Vec<f64> = (0..a.ncols()).map(|i| 1.0 + (i % 7) as f64).collect();
    let spmv = serde_json::json!({"matrix_id": id, "x": x, "precision": "f64"});
    let (status, body) = request(
        addr,
        "/spmv",
        "application/json",
        spmv.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{body}");
    let y: Vec<f64> = serde_json::from_value(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["y"].clone(),
    )
    .unwrap();
    let y_ref = sparse::spmv::spmv_ref(&a, &x).unwrap();
    assert!(sparse::spmv::compare(&a, &x, &y, &y_ref).ok());

    // The request log is flushed when the server stops.
    stop(&mut server.0);
    let s = store::Store::connect(Some(&url)).await.unwrap();
    assert_eq!(s.backend(), store::Backend::Postgres);
    let logged = s.requests_since(store::RequestId(0), 100).await.unwrap();
    let routes: Vec<(&str, u16)> = logged
        .iter()
        .map(|r| (r.record.route.as_str(), r.record.status))
        .collect();
    assert!(routes.contains(&("/spmv", 200)), "{routes:?}");
    assert!(logged.iter().all(|r| r.at.ends_with('Z')));
}
