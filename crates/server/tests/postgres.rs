//! The server binary with a `postgres://` DATABASE_URL: it migrates the
//! database, answers an upload and a multiplication, and its request log lands
//! in PostgreSQL.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use store::testing::{postgres_database, required};

/// Stops the server (SIGTERM, so that it drains and flushes its request log)
/// when the test ends, also on failure.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        stop(&mut self.0);
    }
}

/// SIGTERM, then wait.
fn stop(child: &mut Child) {
    if child.try_wait().ok().flatten().is_none() {
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait();
    }
}

/// Starts the release server on a free loopback port with `database_url`.
fn start(database_url: &str) -> (Server, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_server"))
        .env("DATABASE_URL", database_url)
        .env_remove("SPMV_NO_DATABASE")
        .args(["--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting the server");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let server = Server(child);
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
    (server, addr)
}

/// One HTTP/1.1 request; gives the status and the body.
fn request(addr: SocketAddr, path: &str, content_type: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
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
