//! Stateless replicas: three server processes on one database (PostgreSQL,
//! and one SQLite file) behave as one service. A matrix uploaded on A is
//! multiplied on B and read on C, deleted on C and then gone on A and B too,
//! although both hold a copy in their caches; a matrix belongs to the API key
//! that uploaded it on every replica.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ChildStdout;
use store::testing::{postgres_database, required};

use crate::common;

use common::process::{http, listening, spawn, Server};

const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-9876543210ab";

/// Starts a release server with `database_url`, the two test keys and the id
/// secret every replica shares.
fn start(database_url: &str) -> (Server, ChildStdout) {
    let env = [
        ("SPMV_API_KEYS", format!("alice:{ALICE},bob:{BOB}")),
        ("SPMV_ID_SECRET", "02".repeat(32)),
    ];
    spawn(database_url, &env)
}

/// Three replicas on one database, started together.
fn replicas(database_url: &str) -> Vec<(Server, SocketAddr)> {
    let started: Vec<_> = (0..3).map(|_| start(database_url)).collect();
    started
        .into_iter()
        .map(|(server, out)| (server, listening(out)))
        .collect()
}

/// One HTTP/1.1 request with an API key; gives the status and the body.
fn call(addr: SocketAddr, method: &str, path: &str, key: &str, body: &[u8]) -> (u16, String) {
    let content_type = if path == "/spmv" {
        "application/json"
    } else {
        "text/plain"
    };
    let auth = format!("Authorization: Bearer {key}\r\n");
    http(addr, method, path, content_type, &auth, body)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Upload on A, multiply on B, read on C, delete on C: then gone on A and B,
/// and never visible to the other key.
fn upload_multiply_delete_across_replicas(database_url: &str) {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../sparse/tests/data/HB__can_229.mtx.gz");
    let a: sparse::Csr<f64> = sparse::mm::read_path(&path, &Default::default()).unwrap();
    let r = replicas(database_url);
    let (ra, rb, rc) = (r[0].1, r[1].1, r[2].1);

    let (status, body) = call(
        ra,
        "POST",
        "/matrices",
        ALICE,
        &std::fs::read(&path).unwrap(),
    );
    assert_eq!(status, 201, "{body}");
    let id = json(&body)["id"].as_str().unwrap().to_string();

    let x: Vec<f64> = (0..a.ncols()).map(|i| 1.0 + (i % 7) as f64).collect();
    let spmv = serde_json::json!({"matrix_id": id, "x": x, "precision": "f64"}).to_string();
    let (status, body) = call(rb, "POST", "/spmv", ALICE, spmv.as_bytes());
    assert_eq!(status, 200, "B multiplies A's upload: {body}");
    let y: Vec<f64> = serde_json::from_value(json(&body)["y"].clone()).unwrap();
    let y_ref = sparse::spmv::spmv_ref(&a, &x).unwrap();
    assert!(sparse::spmv::compare(&a, &x, &y, &y_ref).ok());
    // A multiplies too, from its own cache.
    assert_eq!(call(ra, "POST", "/spmv", ALICE, spmv.as_bytes()).0, 200);

    // Another key sees nothing, on any replica.
    let matrix = format!("/matrices/{id}");
    assert_eq!(call(rb, "POST", "/spmv", BOB, spmv.as_bytes()).0, 404);
    assert_eq!(call(rc, "GET", &matrix, BOB, b"").0, 404);
    assert_eq!(call(rc, "DELETE", &matrix, BOB, b"").0, 404);

    let (status, body) = call(rc, "GET", &matrix, ALICE, b"");
    assert_eq!(status, 200, "C reads A's upload: {body}");
    assert_eq!(json(&body)["matrix"]["nnz"], a.nnz());
    assert_eq!(call(rc, "DELETE", &matrix, ALICE, b"").0, 204);

    // Gone everywhere, although A and B still had it cached.
    for (replica, name) in [(ra, "A"), (rb, "B"), (rc, "C")] {
        let (status, body) = call(replica, "POST", "/spmv", ALICE, spmv.as_bytes());
        assert_eq!(status, 404, "{name} after the delete: {body}");
        assert_eq!(json(&body)["error"]["code"], "matrix_not_found");
        assert_eq!(call(replica, "GET", &matrix, ALICE, b"").0, 404, "{name}");
    }
    assert_eq!(call(ra, "DELETE", &matrix, ALICE, b"").0, 404);

    // Uploaded again on B, it is back for A.
    assert_eq!(
        call(
            rb,
            "POST",
            "/matrices",
            ALICE,
            &std::fs::read(&path).unwrap()
        )
        .0,
        201
    );
    assert_eq!(call(ra, "POST", "/spmv", ALICE, spmv.as_bytes()).0, 200);
}

/// Whether this machine has an OpenCL device (required under CI). Probed once
/// per test binary: opening OpenCL from two test threads at once is not safe
/// on every driver (PoCL crashed so here).
fn have_device() -> bool {
    static PROBE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let probe = PROBE.get_or_init(|| {
        engine::Engine::new(None)
            .map(drop)
            .map_err(|e| e.to_string())
    });
    match probe {
        Ok(()) => true,
        Err(e) => {
            assert!(!required(), "an OpenCL device is required here: {e}");
            eprintln!("SKIP: no OpenCL device ({e})");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_on_postgres_are_one_service() {
    if !have_device() {
        return;
    }
    let Some(url) = postgres_database("three_replicas_on_postgres_are_one_service").await else {
        return;
    };
    tokio::task::spawn_blocking(move || upload_multiply_delete_across_replicas(&url))
        .await
        .unwrap();
}

#[test]
fn three_replicas_on_one_sqlite_file_are_one_service() {
    if !have_device() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    upload_multiply_delete_across_replicas(&url);
}
