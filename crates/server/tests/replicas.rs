//! Stateless replicas: three server processes on one database (PostgreSQL,
//! and one SQLite file) behave as one service. A matrix uploaded on A is
//! multiplied on B and read on C, deleted on C and then gone on A and B too,
//! although both hold a copy in their caches; a matrix belongs to the API key
//! that uploaded it on every replica.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use store::testing::{postgres_database, required};

const ALICE: &str = "alice-key-0123456789";
const BOB: &str = "bob-key-9876543210ab";

/// Stops a server (SIGTERM) when the test ends, also on failure.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.0.id().to_string()])
                .status();
            let _ = self.0.wait();
        }
    }
}

/// Starts a release server on a free loopback port with `database_url`, the
/// two test keys and the id secret every replica shares.
fn spawn(database_url: &str) -> (Server, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_server"))
        .env("DATABASE_URL", database_url)
        .env_remove("SPMV_NO_DATABASE")
        .env("SPMV_API_KEYS", format!("alice:{ALICE},bob:{BOB}"))
        .env("SPMV_ID_SECRET", "02".repeat(32))
        .args(["--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the server");
    let out = BufReader::new(child.stdout.take().unwrap());
    (Server(child), out)
}

/// The address a started server prints once it listens.
fn listening(out: BufReader<std::process::ChildStdout>) -> SocketAddr {
    let mut lines = out.lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the server exited before listening")
            .unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    // Keep reading, so that what the server prints later does not meet a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    addr
}

/// Three replicas on one database, started together.
fn replicas(database_url: &str) -> Vec<(Server, SocketAddr)> {
    let started: Vec<_> = (0..3).map(|_| spawn(database_url)).collect();
    started
        .into_iter()
        .map(|(server, out)| (server, listening(out)))
        .collect()
}

/// One HTTP/1.1 request with an API key; gives the status and the body.
fn call(addr: SocketAddr, method: &str, path: &str, key: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        if path == "/spmv" {
            "application/json"
        } else {
            "text/plain"
        },
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
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
